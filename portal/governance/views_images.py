"""Govern -> Images: each kind's default image and each pool's allow-list (platform admins only; the rule is
``scheduler.images``). Thin: parse, call one service, render."""

from django.conf import settings
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_POST

from portal.governance import images as services
from portal.governance.forms import KindImageForm, PoolImagesForm
from portal.governance.views import _save, staff_only
from scheduler.kinds import KINDS
from scheduler.models import Pool
from scheduler.services.runtime import kind_images


def _page(request, bound=None):
    """The page; ``bound``: the one form that was sent, shown as sent with its errors (400)."""
    defaults = kind_images()
    kinds = []
    for kind in KINDS:
        form = KindImageForm(initial={"image": defaults.get(kind, "")}, prefix=f"kind-{kind}")
        kinds.append((kind, bound if bound is not None and bound.prefix == form.prefix else form))
    pools = []
    for pool in Pool.objects.order_by("name"):
        form = PoolImagesForm(initial={"allowed_images": "\n".join(pool.allowed_images)}, prefix=f"pool-{pool.name}")
        pools.append((pool, bound if bound is not None and bound.prefix == form.prefix else form))
    return render(request, "governance/images.html", {
        "kinds": kinds, "pools": pools, "site_default": settings.ROTA_DEFAULT_IMAGE, "section": "images",
    }, status=400 if bound is not None else 200)


@staff_only
def images(request):
    return _page(request)


@staff_only
@require_POST
def kind_image(request, kind: str):
    if kind not in KINDS:
        return _page(request)
    form = KindImageForm(request.POST, prefix=f"kind-{kind}")
    done = _save(request, form, lambda d: services.kind_image_set(
        user=request.user, kind=kind, image=d["image"], reason=d["reason"]),
        f"Default image of {kind} saved.", "govern-images")
    return done if done is not None else _page(request, bound=form)


@staff_only
@require_POST
def pool_images(request, name: str):
    pool = get_object_or_404(Pool, name=name)
    form = PoolImagesForm(request.POST, prefix=f"pool-{pool.name}")
    done = _save(request, form, lambda d: services.pool_images_set(
        user=request.user, pool=pool, patterns=d["allowed_images"], reason=d["reason"]),
        f"Images allowed in pool {pool.name} saved.", "govern-images")
    return done if done is not None else _page(request, bound=form)
