"""Governance pages for platform admins: quotas, priority classes, pools, nodes, budgets, the audit log.
Anyone else gets 404 (the pages do not exist for them). Thin: parse, call one service or selector, render."""

import json
from functools import wraps
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounting.models import Budget
from portal.access import is_platform_admin, job_for
from portal.audit import audit_entries
from portal.csvutil import csv_response
from portal.governance import selectors, services
from portal.governance.forms import (
    BudgetForm,
    JobPriorityForm,
    NodeStateForm,
    PoolTeamsForm,
    PriorityClassForm,
    attach_errors,
    parse_quota_matrix,
)
from portal.models import AuditEntry
from scheduler.models import Node, Pool, PriorityClass

AUDIT_PAGE_SIZE = 200
NODES_PAGE = 50


def staff_only(view):
    """Sign-in first; then platform admins only, everyone else gets 404."""

    @login_required
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not is_platform_admin(request.user):
            raise Http404("No such page")
        return view(request, *args, **kwargs)

    return wrapper


def _errors_onto(form, exc: ValidationError) -> None:
    """A service's refusal, on the form's fields it names (the rest above the form)."""
    for field, errors in exc.message_dict.items():
        form.add_error(field if field in form.fields else None, errors)


def _save(request, form, call, done: str, target: str):
    """Run ``call(cleaned)`` for a valid bound ``form``; redirect to ``target`` with ``done`` (formatted with
    the cleaned fields), or return None (the errors are on the form)."""
    if not form.is_valid():
        return None
    try:
        call(form.cleaned_data)
    except ValidationError as exc:
        _errors_onto(form, exc)
        return None
    messages.success(request, done.format(**form.cleaned_data))
    return redirect(target)


@staff_only
def index(request):
    return redirect("govern-quotas")


def _quota_context(rows, teams, gpu_models, **extra):
    return {"rows": rows, "teams": teams, "gpu_models": gpu_models, "section": "quotas", **extra}


def _quota_impact(rows, changes) -> list[dict]:
    """The cells a set of changes alters, with what each team holds now against its new limit."""
    cells = {cell.key: cell for row in rows for cell in row}
    impact = []
    for ch in changes:
        cell = cells[ch.cell]
        q = cell.quota
        if q is not None and (q.guaranteed, q.limit, q.weight) == (ch.guaranteed, ch.limit, ch.weight):
            continue
        impact.append({"cell": cell, "change": ch,
                       "over_limit": ch.limit is not None and cell.in_use > ch.limit,
                       "over_by": (cell.in_use - ch.limit) if ch.limit is not None else 0})
    return impact


@staff_only
def quotas(request):
    """The quota matrix. POST with ``action=preview`` shows the impact; ``action=save`` applies (a reason is
    required). Every error of a submission is shown at once, on its cell, with what was typed kept."""
    teams, gpu_models, rows = selectors.quota_matrix()
    if request.method != "POST":
        return render(request, "governance/quotas.html", _quota_context(rows, teams, gpu_models))
    changes, errors = parse_quota_matrix(request.POST, rows)
    reason = request.POST.get("reason", "")
    saving = request.POST.get("action") == "save"
    if saving:
        errors |= services.reason_errors(reason)
    if any(key != "reason" for key in errors):
        attach_errors(rows, errors)
        return render(request, "governance/quotas.html",
                      _quota_context(rows, teams, gpu_models, errors=errors, reason=reason), status=400)
    impact = _quota_impact(rows, changes)
    if not saving or errors:  # a preview, or a save that only lacks its reason: show the impact again
        return render(request, "governance/quotas.html",
                      _quota_context(rows, teams, gpu_models, impact=impact, preview=True, reason=reason,
                                     errors=errors, capacity_notes=selectors.capacity_notes(changes)),
                      status=400 if errors else 200)
    try:
        saved = services.quota_matrix_set(user=request.user, changes=changes, reason=reason)
    except services.StaleEdit as exc:
        teams, gpu_models, rows = selectors.quota_matrix()
        messages.error(request, str(exc))
        return render(request, "governance/quotas.html", _quota_context(rows, teams, gpu_models), status=409)
    except ValidationError as exc:
        errors = {k: " ".join(v) for k, v in exc.message_dict.items()}
        attach_errors(rows, errors)
        return render(request, "governance/quotas.html",
                      _quota_context(rows, teams, gpu_models, errors=errors, reason=reason), status=400)
    messages.success(request, f"Saved {len(saved)} quota change(s)." if saved else "Nothing changed.")
    return redirect("govern-quotas")


@staff_only
def priority_classes(request):
    return render(request, "governance/priority_classes.html",
                  {"classes": list(PriorityClass.objects.order_by("-value").prefetch_related("teams")),
                   "section": "priority"})


@staff_only
def priority_class_edit(request, name: str | None = None):
    instance = get_object_or_404(PriorityClass, name=name) if name else None
    form = PriorityClassForm(request.POST or None, instance=instance)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            pc = services.priority_class_set(
                user=request.user, name=instance.name if instance else data["name"], instance=instance,
                values={f: data[f] for f in services.PRIORITY_FIELDS}, reason=data["reason"],
                teams=list(data["teams"]),
            )
        except ValidationError as exc:
            _errors_onto(form, exc)
        else:
            messages.success(request, f"Priority class {pc.name} saved.")
            for warning in services.priority_class_warnings(pc):
                messages.warning(request, warning)
            return redirect("govern-priority-classes")
    heading = f"Edit priority class {instance.name}" if instance else "New priority class"
    return render(request, "governance/priority_class_form.html",
                  {"form": form, "instance": instance, "heading": heading, "section": "priority"},
                  status=400 if form.errors else 200)


@staff_only
def pools(request):
    return _pools_page(request)


def _pools_page(request, bound: PoolTeamsForm | None = None):
    """The pools page; ``bound``: one pool's submitted form, shown as it was sent, with its errors (400)."""
    forms_ = [(pool, bound if bound is not None and bound.prefix == pool.name
               else PoolTeamsForm(initial={"teams": list(pool.teams.all())}, prefix=pool.name))
              for pool in selectors.pools_with_teams()]
    return render(request, "governance/pools.html", {"pools": forms_, "section": "pools"},
                  status=400 if bound is not None else 200)


@staff_only
@require_POST
def pool_teams(request, name: str):
    pool = get_object_or_404(Pool, name=name)
    form = PoolTeamsForm(request.POST, prefix=pool.name)
    if not form.is_valid():
        return _pools_page(request, bound=form)
    try:
        services.pool_set_teams(user=request.user, pool=pool, teams=list(form.cleaned_data["teams"]),
                                reason=form.cleaned_data["reason"])
    except ValidationError as exc:  # shown on the pool's form, with the teams as they were ticked
        _errors_onto(form, exc)
        return _pools_page(request, bound=form)
    messages.success(request, f"Teams of pool {pool.name} saved.")
    return redirect("govern-pools")


def _nodes_filter(params, pools: list[str]) -> tuple[dict[str, str], list[str]]:
    """The nodes page's filter from ``params`` (the query string, or a drain/resume form's ``back``
    field), known values only: one of ``pools``, a state, a piece of the name, and the page; and what is
    wrong with the rest (a pool or state it does not know is named, not silently taken for "all")."""
    pool, state, page = params.get("pool", ""), params.get("state", ""), params.get("page", "")
    f, errors = {}, []
    for key, label, value, known in (("pool", "Pool", pool, pools), ("state", "State", state, dict(Node.STATES))):
        if value in known:
            f[key] = value
        elif value:
            errors.append(f"{label} must be one of {', '.join(known)}; got {value!r} (showing all)")
    q = params.get("q", "").strip()[:63]
    if q:
        f["q"] = q
    if page.isascii() and page.isdigit():
        f["page"] = page
    return f, errors


def _nodes_context(params, **extra):
    """The nodes page: NODES_PAGE nodes a page, by pool, state and name (see ``_nodes_filter``)."""
    pools = _pool_names()
    f, filter_errors = _nodes_filter(params, pools)
    nodes = selectors.nodes_for_governance(pool=f.get("pool", ""), state=f.get("state", ""), q=f.get("q", ""))
    page = Paginator(nodes, NODES_PAGE).get_page(f.get("page"))
    query = urlencode({k: v for k, v in f.items() if k != "page"})
    return {"nodes": list(page), "page": page, "query": query, "back": urlencode({**f, "page": page.number}),
            "pools": pools, "states": Node.STATES, "f": f, "heatmap": selectors.gpu_heatmap(nodes),
            "section": "nodes", "filter_errors": filter_errors, **extra}


@staff_only
def nodes(request):
    return render(request, "governance/nodes.html", _nodes_context(request.GET, form=NodeStateForm()))


@staff_only
@require_POST
def node_state(request, name: str, target: str):
    node = get_object_or_404(Node, name=name)
    form = NodeStateForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"{node.name}: a reason is required to {target} a node.")
        return render(request, "governance/nodes.html", _nodes_context(_back(request), form=form, failed=node.name),
                      status=400)
    state = Node.READY if target == "resume" else Node.DRAINING
    try:
        services.node_change_state(user=request.user, node=node, state=state, reason=form.cleaned_data["reason"])
    except ValidationError as exc:
        messages.error(request, f"{node.name}: {' '.join(exc.messages)}")
    else:
        messages.success(request, f"Node {node.name}: {state}.")
    back = urlencode(_nodes_filter(_back(request), _pool_names())[0])  # known values only: never an open redirect
    return redirect(f"{reverse('govern-nodes')}?{back}" if back else reverse("govern-nodes"))


def _pool_names() -> list[str]:
    return list(Pool.objects.order_by("name").values_list("name", flat=True))


def _back(request) -> QueryDict:
    """The filter and page the drain/resume form was sent from."""
    return QueryDict(request.POST.get("back", "")[:300])


def _audit_rows(entries):
    yield ["at", "actor", "action", "object_type", "object_id", "object_name", "before", "after", "reason"]
    for e in entries.iterator(chunk_size=500):
        yield [e.at.isoformat(), e.actor_name, e.action, e.object_type, e.object_id, e.object_name,
               json.dumps(e.before, sort_keys=True) if e.before is not None else "",
               json.dumps(e.after, sort_keys=True) if e.after is not None else "", e.reason]


@staff_only
def audit_log(request):
    """Every governance change, newest first; ?object_type= and ?actor= filter; ?format=csv exports."""
    object_type = request.GET.get("object_type", "")
    actor = request.GET.get("actor", "")
    entries = audit_entries(object_type=object_type, actor=actor)
    if request.GET.get("format") == "csv":
        return csv_response(_audit_rows(entries), "rota-audit.csv")
    return render(request, "governance/audit.html", {
        "entries": list(entries[:AUDIT_PAGE_SIZE]), "object_type": object_type, "actor": actor,
        "object_types": sorted(set(AuditEntry.objects.values_list("object_type", flat=True).distinct())),
        "actors": sorted(set(AuditEntry.objects.values_list("actor_name", flat=True).distinct())),
        "section": "audit",
    })


@staff_only
def queue(request):
    """Pending and held jobs per pool in the engine's order, with hold/release and priority changes."""
    pool = request.GET.get("pool", "")
    return render(request, "governance/queue.html", {
        "queues": selectors.queue_by_pool(pool=pool), "pool": pool, "section": "queue",
        "queue_url": reverse("govern-queue"), "jobs_url": reverse("job-list"),
        "pool_names": list(Pool.objects.order_by("name").values_list("name", flat=True)),
        "priority_classes": list(PriorityClass.objects.order_by("-value")),
    })


def _back_to_queue(request):
    pool = request.POST.get("pool", "")
    return redirect(f"{reverse('govern-queue')}?{urlencode({'pool': pool})}" if pool else reverse("govern-queue"))


@staff_only
@require_POST
def queue_hold(request, job_id: int, target: str):
    job = job_for(request.user, job_id)
    try:
        services.queue_job_hold(user=request.user, job=job, hold=target == "hold",
                                reason=request.POST.get("reason", ""))
    except ValidationError as exc:
        messages.error(request, f"Job #{job.pk}: {' '.join(exc.messages)}")
    else:
        messages.success(request, f"Job #{job.pk}: {'held' if target == 'hold' else 'released'}.")
    return _back_to_queue(request)


@staff_only
@require_POST
def queue_priority(request, job_id: int):
    job = job_for(request.user, job_id)
    form = JobPriorityForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Job #{job.pk}: " + "; ".join(
            f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
        return _back_to_queue(request)
    try:
        services.job_priority_class_set(user=request.user, job=job, priority_class=form.cleaned_data["priority_class"],
                                        reason=form.cleaned_data["reason"])
    except ValidationError as exc:
        messages.error(request, f"Job #{job.pk}: {' '.join(exc.messages)}")
    else:
        messages.success(request, f"Job #{job.pk}: priority class {form.cleaned_data['priority_class'].name}.")
    return _back_to_queue(request)


@staff_only
def budgets(request):
    return render(request, "governance/budgets.html",
                  {"budgets": selectors.budgets_this_month(), "alerts": selectors.budget_alerts(),
                   "section": "budgets"})


@staff_only
def budget_edit(request, pk: int | None = None):
    instance = get_object_or_404(Budget.objects.select_related("team"), pk=pk) if pk else None
    form = BudgetForm(request.POST or None, instance=instance)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            budget = services.budget_set(
                user=request.user, team=instance.team if instance else data["team"],
                unit=instance.unit if instance else data["unit"], instance=instance,
                values={f: data[f] for f in services.BUDGET_FIELDS}, reason=data["reason"])
        except ValidationError as exc:
            _errors_onto(form, exc)
        else:
            messages.success(request, f"Budget of team {budget.team.name} saved.")
            return redirect("govern-budgets")
    heading = f"Budget of team {instance.team.name} ({instance.get_unit_display()})" if instance else "New budget"
    return render(request, "governance/budget_form.html",
                  {"form": form, "instance": instance, "heading": heading, "section": "budgets"},
                  status=400 if form.errors else 200)


@staff_only
@require_POST
def budget_delete(request, pk: int):
    budget = get_object_or_404(Budget.objects.select_related("team"), pk=pk)
    try:
        services.budget_delete(user=request.user, budget=budget, reason=request.POST.get("reason", ""))
    except ValidationError as exc:
        messages.error(request, f"Budget of team {budget.team.name} not removed: {'; '.join(exc.messages)}")
    else:
        messages.success(request, f"Budget of team {budget.team.name} removed.")
    return redirect("govern-budgets")
