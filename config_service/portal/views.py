"""Portal pages: tenants, address spaces, addresses (paged, filtered, sorted, live stats),
messaging users, connection examples, usage and history. Role-aware: a viewer sees no edit
controls, and every write is checked again on the server by tenant_for and the services. Pages
that only show something take GET (and HEAD) alone: a POST to them gets 405."""
import base64
import datetime
import secrets
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from core.api import manifests
from core.errors import Invalid, ServiceError
from eventlog.events import public_payload
from eventlog.models import ConfigEvent
from tenants.models import AddressPlan, TenantQuota
from tenants.roles import Action

from .. import brokers, readings, services, space_connectors
from ..api.resources import connection_url, endpoints
from ..models import Address, MessagingUser
from ..safe_load import load_yaml_all, read_bounded
from ..status import address_status, agent_states, phase_filter, space_status
from ..wire import receive_address, send_address
from . import forms, usage_charts
from .base import attempt, ctx, page, space_of
from .stats import address_stats

PAGE_SIZE = 50
SORTS = {"name": "name", "-name": "-name", "type": "type", "-type": "-type", "plan": "plan",
         "-plan": "-plan", "created": "created_at", "-created": "-created_at"}
PHASES = ("Pending", "Configuring", "Active", "Failed", "Terminating")


@login_required
@require_safe
def home(request):
    p_tenants = list(request.user.memberships.select_related("tenant").order_by("tenant__slug"))
    if len(p_tenants) == 1 and not request.user.is_staff:
        return redirect("portal:spaces", tenant=p_tenants[0].tenant.slug)
    return render(request, "portal/home.html", {"memberships": p_tenants})


@login_required
def spaces(request, tenant):
    p = page(request, tenant)
    form = forms.SpaceForm()
    if request.method == "POST":
        p = page(request, tenant, Action.MANAGE_SPACES)
        form = forms.SpaceForm(request.POST)
        if form.is_valid() and attempt(request, form, lambda: services.create_address_space(
                ctx=ctx(request), tenant=p.tenant, name=form.cleaned_data["name"],
                type=form.cleaned_data["type"], plan=form.cleaned_data["plan"])):
            messages.success(request, f"Address space {form.cleaned_data['name']} created.")
            return redirect("portal:space", tenant=tenant, space=form.cleaned_data["name"])
    rows = list(p.tenant.address_spaces.order_by("name"))
    states = agent_states(s.uid for s in rows)
    quota = TenantQuota.objects.filter(tenant=p.tenant).first()
    return render(request, "portal/spaces.html", p.context(
        spaces=[(s, space_status(s, states.get(s.uid, {}))) for s in rows], form=form,
        quota=quota, addresses_used=Address.objects.filter(space__tenant=p.tenant).count()))


@login_required
@require_safe
def space(request, tenant, space):
    p = page(request, tenant)
    s = space_of(p, space)
    states = agent_states([s.uid]).get(s.uid, {})
    table = _address_table(request, s, states)
    plans = [(n, n) for n in AddressPlan.objects.filter(space_plans__name=s.plan)
             .values_list("name", flat=True)]
    from tenants.models import AddressSpacePlan

    space_plans = [(n, n) for n in AddressSpacePlan.objects.filter(
        address_space_type=s.type).values_list("name", flat=True)]
    ca = readings.get().ca_cert(s)
    return render(request, "portal/space.html", p.context(
        space=s, status=space_status(s, states), endpoints=endpoints(s, ca), ca_cert=ca,
        connectors=_connectors(s),
        form=forms.AddressForm(space=s), bulk_form=forms.BulkForm(),
        space_plan_form=forms.PlanForm(choices=space_plans, initial={"plan": s.plan},
                                       auto_id="space_%s"),
        address_plans=plans, **table))


def _connectors(s) -> list[dict]:
    """The space's connectors to remote endpoints with their state now (status.connectors)."""
    spec = space_connectors.of(s.spec)
    if not spec or s.terminating:
        return []
    state = {c["name"]: c for c in readings.get().connectors(s)}
    return [{"name": c["name"],
             "hosts": ", ".join(f"{h['host']}:{h['port']}" for h in c["endpointHosts"]),
             "patterns": ", ".join(a["pattern"] for a in c["addresses"]),
             "tls": "tls" in c,
             **state.get(c["name"], {"isReady": False, "messages": []})} for c in spec]


def _address_table(request, s, states) -> dict:
    q = request.GET
    rows = Address.objects.filter(space=s)
    if q.get("type"):
        rows = rows.filter(type=q["type"])
    if q.get("search"):
        rows = rows.filter(Q(address__icontains=q["search"]) | Q(name__icontains=q["search"]))
    if q.get("phase") in PHASES:
        rows = rows.filter(phase_filter(s, q["phase"], states))
    sort = q.get("sort") if q.get("sort") in SORTS else "name"
    paginator = Paginator(rows.order_by(SORTS[sort], "id"), PAGE_SIZE)
    page_obj = paginator.get_page(q.get("page"))
    items = [(a, address_status(s, a, states)) for a in page_obj.object_list]
    keep = {k: v for k, v in q.items() if k in ("type", "search", "phase") and v}
    return {"items": items, "page_obj": page_obj, "sort": sort, "filters": keep,
            "base": f"/portal/t/{s.tenant.slug}/spaces/{s.name}/",
            "query": urlencode({**keep, "sort": sort}), "phases": PHASES,
            "types": ("queue", "topic", "anycast", "multicast", "subscription", "deadletter")}


@login_required
@require_safe
def address_rows(request, tenant, space):
    """The addresses table alone (htmx: filtering, sorting and paging without a reload)."""
    p = page(request, tenant)
    s = space_of(p, space)
    states = agent_states([s.uid]).get(s.uid, {})
    return render(request, "portal/_addresses.html", p.context(
        space=s, **_address_table(request, s, states)))


@login_required
@require_safe
def address_stats_view(request, tenant, space):
    """Live stats for the addresses on the current page (htmx polls it)."""
    p = page(request, tenant)
    s = space_of(p, space)
    names = request.GET.getlist("a")[:PAGE_SIZE]
    rows = list(Address.objects.filter(space=s, name__in=names))
    return render(request, "portal/_stats.html", {"stats": address_stats(s, rows)})


@login_required
@require_POST
def address_create(request, tenant, space):
    p = page(request, tenant, Action.MANAGE_ADDRESSES)
    s = space_of(p, space)
    form = forms.AddressForm(request.POST, space=s)
    if form.is_valid():
        d = form.cleaned_data
        if attempt(request, form, lambda: services.create_address(
                ctx=ctx(request), space=s, address=d["address"], type=d["type"], plan=d["plan"],
                topic=d["topic"] or None, deadletter=d["deadletter"] or None)):
            messages.success(request, f"Address {d['address']} created.")
    else:
        for field, errors in form.errors.items():
            messages.error(request, f"{field}: {' '.join(errors)}")
    return redirect("portal:space", tenant=tenant, space=space)


def _manifest_items(docs: list) -> list:
    """The Address documents of an upload: each document, or the items of an AddressList."""
    items = []
    for i, doc in enumerate(docs):
        kind = doc.get("kind") if isinstance(doc, dict) else None
        listed = doc.get("items", []) if isinstance(kind, str) and kind.endswith("List") \
            else [doc]
        if not isinstance(listed, list):
            raise Invalid("items must be a list", f"documents[{i}].items")
        items += [item for item in listed if item]
    return items


@login_required
@require_POST
def address_bulk(request, tenant, space):
    p = page(request, tenant, Action.MANAGE_ADDRESSES)
    s = space_of(p, space)
    upload = request.FILES.get("manifest")
    try:
        items = _manifest_items(load_yaml_all(read_bounded(upload)) if upload else [])
    except ServiceError as exc:
        messages.error(request, f"Not a usable YAML file: {exc.field}: {exc.message}")
        return redirect("portal:space", tenant=tenant, space=space)
    created, failed = 0, []
    for doc in items:
        spec = doc.get("spec") if isinstance(doc, dict) else None
        label = spec.get("address") if isinstance(spec, dict) else None
        try:
            meta, spec = manifests.read(doc, "Address")
            services.create_address(
                ctx=ctx(request), space=s, name=meta.get("name"), address=spec.get("address"),
                type=spec.get("type"), plan=spec.get("plan"), topic=spec.get("topic"),
                deadletter=spec.get("deadletter"), expiry=spec.get("expiry"), spec=spec)
            created += 1
        except ServiceError as exc:
            failed.append(f"{label}: {exc.message}")
    messages.success(request, f"{created} address(es) created.")
    for line in failed[:20]:
        messages.error(request, line)
    return redirect("portal:space", tenant=tenant, space=space)


@login_required
@require_POST
def address_plan(request, tenant, space, address):
    p = page(request, tenant, Action.MANAGE_ADDRESSES)
    s = space_of(p, space)
    a = get_object_or_404(Address, space=s, name=address)
    form = forms.PlanForm(request.POST, choices=[(request.POST.get("plan"),) * 2])
    if form.is_valid() and attempt(request, form, lambda: services.update_address(
            ctx=ctx(request), space=s, name=a.name, plan=form.cleaned_data["plan"],
            deadletter=a.deadletter or None, expiry=a.expiry or None, spec=a.spec)):
        messages.success(request, f"Plan of {a.address} changed.")
    return redirect("portal:space", tenant=tenant, space=space)


@login_required
def address_delete(request, tenant, space, address):
    p = page(request, tenant, Action.MANAGE_ADDRESSES)
    s = space_of(p, space)
    a = get_object_or_404(Address, space=s, name=address)
    if request.method == "POST":
        try:
            services.delete_address(ctx=ctx(request), space=s, name=a.name)
            messages.success(request, f"Address {a.address} deleted.")
        except ServiceError as exc:
            messages.error(request, exc.message)
        return redirect("portal:space", tenant=tenant, space=space)
    return render(request, "portal/confirm.html", p.context(
        title=f"Delete address {a.address}?", body="Stored messages of a queue are lost.",
        back=f"/portal/t/{tenant}/spaces/{space}/"))


@login_required
def address_purge(request, tenant, space, address):
    p = page(request, tenant, Action.MANAGE_ADDRESSES)
    s = space_of(p, space)
    a = get_object_or_404(Address, space=s, name=address, type__in=("queue", "subscription",
                                                                     "deadletter"))
    if request.method == "POST":
        try:
            services.purge_address(ctx=ctx(request), space=s, name=a.name)
            messages.success(request, f"Purging the messages of {a.address}.")
        except ServiceError as exc:
            messages.error(request, exc.message)
        return redirect("portal:space", tenant=tenant, space=space)
    return render(request, "portal/confirm.html", p.context(
        title=f"Purge every message of {a.address}?", body="This cannot be undone.",
        back=f"/portal/t/{tenant}/spaces/{space}/"))


@login_required
def space_delete(request, tenant, space):
    p = page(request, tenant, Action.MANAGE_SPACES)
    s = space_of(p, space)
    if request.method == "POST":
        services.delete_address_space(ctx=ctx(request), space=s)
        messages.success(request, f"Address space {s.name} is being deleted.")
        return redirect("portal:spaces", tenant=tenant)
    return render(request, "portal/confirm.html", p.context(
        title=f"Delete address space {s.name}?",
        body="All its addresses, stored messages and users go with it.",
        back=f"/portal/t/{tenant}/spaces/{space}/"))


@login_required
@require_POST
def space_plan(request, tenant, space):
    p = page(request, tenant, Action.CHANGE_SPACE_PLAN)
    s = space_of(p, space)
    form = forms.PlanForm(request.POST, choices=[(request.POST.get("plan"),) * 2])
    if form.is_valid() and attempt(request, form, lambda: services.change_address_space_plan(
            ctx=ctx(request), space=s, plan=form.cleaned_data["plan"])):
        messages.success(request, f"Plan of {s.name} changed.")
    return redirect("portal:space", tenant=tenant, space=space)


@never_cache  # shows a new password once: no browser or proxy may keep the page
@login_required
def users(request, tenant, space):
    p = page(request, tenant)
    s = space_of(p, space)
    form, shown = forms.UserForm(), None
    if request.method == "POST":
        p = page(request, tenant, Action.MANAGE_USERS)
        form = forms.UserForm(request.POST)
        password = secrets.token_urlsafe(18)
        if form.is_valid() and attempt(request, form, lambda: services.create_messaging_user(
                ctx=ctx(request), space=s, username=form.cleaned_data["username"],
                authentication={"type": "password",
                                "password": base64.b64encode(password.encode()).decode()},
                authorization=forms.rules(form.cleaned_data["send"],
                                          form.cleaned_data["recv"]))):
            shown = (form.cleaned_data["username"], password)
            form = forms.UserForm()
    return render(request, "portal/users.html", p.context(
        space=s, users=MessagingUser.objects.filter(space=s).order_by("username"), form=form,
        shown=shown))


@never_cache  # shows the new password once
@login_required
@require_POST
def user_rotate(request, tenant, space, user):
    p = page(request, tenant, Action.MANAGE_USERS)
    s = space_of(p, space)
    u = get_object_or_404(MessagingUser, space=s, name=user)
    password = secrets.token_urlsafe(18)
    services.update_messaging_user(
        ctx=ctx(request), space=s, name=u.name,
        authentication={"type": "password",
                        "password": base64.b64encode(password.encode()).decode()})
    return render(request, "portal/users.html", p.context(
        space=s, users=MessagingUser.objects.filter(space=s).order_by("username"),
        form=forms.UserForm(), shown=(u.username, password)))


@login_required
@require_POST
def user_permissions(request, tenant, space, user):
    p = page(request, tenant, Action.MANAGE_USERS)
    s = space_of(p, space)
    u = get_object_or_404(MessagingUser, space=s, name=user)
    form = forms.PermissionsForm(request.POST)
    if form.is_valid() and attempt(request, form, lambda: services.update_messaging_user(
            ctx=ctx(request), space=s, name=u.name,
            authorization=forms.rules(form.cleaned_data["send"], form.cleaned_data["recv"]))):
        messages.success(request, f"Permissions of {u.username} saved.")
    return redirect("portal:users", tenant=tenant, space=space)


@login_required
def user_delete(request, tenant, space, user):
    p = page(request, tenant, Action.MANAGE_USERS)
    s = space_of(p, space)
    u = get_object_or_404(MessagingUser, space=s, name=user)
    if request.method == "POST":
        services.delete_messaging_user(ctx=ctx(request), space=s, name=u.name)
        messages.success(request, f"User {u.username} deleted.")
        return redirect("portal:users", tenant=tenant, space=space)
    return render(request, "portal/confirm.html", p.context(
        title=f"Delete user {u.username}?", body="Its clients can no longer connect.",
        back=f"/portal/t/{tenant}/spaces/{space}/users/"))


def _mqtt_topic(space, address: str) -> str:
    """A topic the MQTT example can use: a topic address with a subtopic, else the address."""
    topic = Address.objects.filter(space=space, type="topic").order_by("name").values_list(
        "address", flat=True).first()
    return f"{topic}/room1" if topic else address


@login_required
@require_safe
def connect(request, tenant, space):
    p = page(request, tenant)
    s = space_of(p, space)
    chosen = request.GET.get("user") or MessagingUser.objects.filter(space=s).values_list(
        "username", flat=True).first() or "<username>"
    endpoint = endpoints(s)[0]
    port = endpoint["servicePorts"][0]["port"]
    address, kind = Address.objects.filter(space=s).order_by("name").values_list(
        "address", "type").first() or ("myqueue", "queue")
    mqtt = next((e for e in endpoints(s) if e["name"] == "mqtt"), None)
    # Through the brokered-amqp relay a brokered space's addresses work by their names too.
    bare = s.type == "brokered" and bool(brokers.pooled_broker(s.broker).tenant_amqp_port)
    return render(request, "portal/connect.html", p.context(
        space=s, endpoint=endpoint, port=port, user=chosen, address=address,
        send_address=address if bare else send_address(s.type, kind, address),
        receive_address=address if bare else receive_address(s.type, kind, address), mqtt=mqtt,
        mqtt_login=mqtt["username"].replace("<username>", chosen) if mqtt else "",
        mqtt_topic=_mqtt_topic(s, address),
        login=f"{chosen}@{s.vhost}", url=connection_url(s, chosen),
        users=MessagingUser.objects.filter(space=s).values_list("username", flat=True)))


@login_required
@require_safe
def usage(request, tenant):
    p = page(request, tenant)
    try:
        day = datetime.date.fromisoformat(request.GET["day"]) if request.GET.get("day") else (
            usage_charts.latest_hourly_day(p.tenant))
    except ValueError:
        return HttpResponseBadRequest("day: expected a date as YYYY-MM-DD")
    limits, limits_chart = usage_charts.limits(p.tenant)
    return render(request, "portal/usage.html", p.context(
        daily=usage_charts.daily(p.tenant, timezone.now().date()),
        hourly=usage_charts.hourly(p.tenant, day) if day else None,
        limits=limits, limits_chart=limits_chart,
        quota=TenantQuota.objects.filter(tenant=p.tenant).first()))


@login_required
@require_safe
def history(request, tenant):
    p = page(request, tenant)
    events = ConfigEvent.objects.filter(tenant=p.tenant).order_by("-position")
    page_obj = Paginator(events, 50).get_page(request.GET.get("page"))
    return render(request, "portal/history.html", p.context(
        page_obj=page_obj, events=[(e, public_payload(e.payload)) for e in page_obj]))
