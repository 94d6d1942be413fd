"""Summed ledger days follow the rate cards: a card created, moved, renumbered or deleted changes which
version each hour of the ledger is rated under from its ``effective_from`` on, so the days summed from then on
are dropped (``usage_days_forget``) and summed again by the next rollup. Signals cover every way a card is
changed: the governance service, the Django admin and the shell."""

from django.db.models.signals import post_save, pre_delete, pre_save
from django.dispatch import receiver

from accounting.models import RateCard


@receiver(pre_save, sender=RateCard)
def _remember_effective_from(sender, instance: RateCard, **kwargs) -> None:
    before = None
    if instance.pk is not None:
        before = RateCard.objects.filter(pk=instance.pk).values_list("effective_from", flat=True).first()
    instance._rota_effective_before = before


@receiver(post_save, sender=RateCard)
def _card_saved(sender, instance: RateCard, raw: bool = False, **kwargs) -> None:
    if raw:  # loaddata: fixtures come with their own ledger
        return
    from accounting.services import usage_days_forget

    # As stored: a card may be saved with its time as text, which the database parsed.
    now = RateCard.objects.filter(pk=instance.pk).values_list("effective_from", flat=True).get()
    before = getattr(instance, "_rota_effective_before", None)
    usage_days_forget(min(now, before) if before is not None else now)


@receiver(pre_delete, sender=RateCard)
def _card_deleted(sender, instance: RateCard, **kwargs) -> None:
    from accounting.services import usage_days_forget

    stored = RateCard.objects.filter(pk=instance.pk).values_list("effective_from", flat=True).first()
    if stored is not None:  # (in the delete's transaction: undone with it)
        usage_days_forget(stored)
