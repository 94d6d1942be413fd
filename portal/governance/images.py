"""Governance of container images: each kind's default image and each pool's allow-list (the rule itself is
``scheduler.images``). Every change and its audit entry commit in one transaction; platform admins only."""

from django.core.exceptions import ValidationError
from django.db import transaction

from portal.audit import audit_record
from portal.governance.services import _require_admin, _require_reason
from scheduler.images import MAX_PATTERNS, ImageError, image_allowed, image_parse, pattern_check
from scheduler.kinds import KINDS
from scheduler.models import KindImage, Pool
from scheduler.services.jobs import wake_cycle


def patterns_parse(text: str) -> list[str]:
    """An allow-list as an admin types it (one entry a line, or separated by commas), each entry checked
    (``scheduler.images.pattern_check``); repeats dropped. Raises ValidationError (``allowed_images``) naming
    every bad entry."""
    entries = [e for line in (text or "").splitlines() for e in line.split(",") if e.strip()]
    patterns, problems = [], []
    for entry in entries:
        try:
            pattern = pattern_check(entry)
        except ImageError as exc:
            problems.append(str(exc))
            continue
        if pattern not in patterns:
            patterns.append(pattern)
    if len(patterns) > MAX_PATTERNS:
        problems.append(f"at most {MAX_PATTERNS} entries; got {len(patterns)}")
    if problems:
        raise ValidationError({"allowed_images": problems})
    return patterns


def pool_images_set(*, user, pool: Pool, patterns: list[str], reason: str = "") -> Pool:
    """Set the images ``pool`` may run (checked patterns, see ``patterns_parse``; empty: none). A change needs a
    reason; jobs waiting for the pool are judged again at once (an image no longer allowed: ImageNotAllowed).
    Work already running keeps running."""
    _require_admin(user)
    with transaction.atomic():
        pool = Pool.objects.select_for_update().get(pk=pool.pk)
        before = list(pool.allowed_images)
        if before == patterns:
            return pool
        _require_reason(reason)
        pool.allowed_images = patterns
        pool.save(update_fields=["allowed_images"])
        audit_record(actor=user, action="pool.images", object_type="pool", object_id=pool.pk, object_name=pool.name,
                     before={"allowed_images": before}, after={"allowed_images": patterns}, reason=reason)
        wake_cycle()
    return pool


def kind_image_set(*, user, kind: str, image: str, reason: str = "") -> KindImage | None:
    """Set the image jobs of ``kind`` run in when they name none (blank: back to settings.ROTA_DEFAULT_IMAGE).
    The image must be a full reference that at least one pool allows (else no job of the kind could run);
    a change needs a reason. Jobs already submitted keep the image they were given."""
    _require_admin(user)
    if kind not in KINDS:
        raise ValidationError({"kind": f"must be one of {', '.join(KINDS)}; got {kind!r}"})
    image = (image or "").strip()
    if image:
        try:
            image = str(image_parse(image))
        except ImageError as exc:
            raise ValidationError({"image": str(exc)}) from None
        lists = dict(Pool.objects.values_list("name", "allowed_images"))
        if not any(image_allowed(image_parse(image), patterns) for patterns in lists.values()):
            raise ValidationError({"image": f"{image} is allowed in no pool, so no {kind} job could run in it: "
                                            "allow it in a pool first"})
    with transaction.atomic():
        row = KindImage.objects.select_for_update().filter(kind=kind).first()
        before = row.image if row else ""
        if before == image:
            return row
        _require_reason(reason)
        if not image:
            row.delete()
            row = None
        elif row is None:
            row = KindImage.objects.create(kind=kind, image=image)
        else:
            row.image = image
            row.save(update_fields=["image", "updated_at"])
        audit_record(actor=user, action="kind.image", object_type="kind", object_id=kind, object_name=kind,
                     before={"image": before or None}, after={"image": image or None}, reason=reason)
    return row
