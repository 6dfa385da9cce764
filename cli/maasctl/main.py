"""maasctl's command line: argument parsing, one function per command, exit codes.

Exit codes (errors.py): 0 success; 1 an error from the server (`Error from server (NotFound):
...` on stderr) or a failed operation; 2 bad usage (arguments, a manifest, not logged in);
3 `wait` or `receive` timed out; 4 the API or a messaging endpoint cannot be reached.
"""
import argparse
import sys
from pathlib import Path

from . import __version__, config, kinds, login, manifests, messaging, output, resources
from .client import Client
from .errors import FAILED, OK, USAGE, ApiError, CliError, UsageError


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: exit 2 with kubectl's wording
        self.print_usage(sys.stderr)
        raise UsageError(message)


def _globals(p: argparse.ArgumentParser) -> None:
    # On maasctl and every subcommand, so that `maasctl get as --tenant acme` and
    # `maasctl --tenant acme get as` both work as kubectl's do (SUPPRESS: a flag given on one
    # side is never reset by the other's default).
    p.add_argument("--url", default=argparse.SUPPRESS, help="the MaaS API, e.g. https://maas.example.com")
    p.add_argument("--token", default=argparse.SUPPRESS, help="a bearer token (maas_pat_...)")
    p.add_argument("--tenant", "-n", default=argparse.SUPPRESS, help="the tenant to work in")


def _session(args, tenant: bool = True) -> tuple[Client, str]:
    cfg = config.load()
    for key in ("url", "token", "tenant"):
        if getattr(args, key, None):
            setattr(cfg, key, getattr(args, key))
    cfg.require()
    client = login.client_for(cfg)
    return client, (cfg.require_tenant() if tenant else cfg.tenant)


def _scoped_targets(args) -> tuple[Client, list[resources.Target]]:
    """The session and the objects named; a tenant is needed only for a tenant's objects
    (plans are global)."""
    client, tenant = _session(args, tenant=False)
    targets = _targets(args, tenant)
    if not tenant and any(t.kind.tenant_scoped for t in targets):
        config.Config().require_tenant()  # raises the usage error that says how to set one
    return client, targets


def _in_space(kind: kinds.Kind, name: str, args) -> str:
    """`get address myqueue -s myspace` means myspace.myqueue."""
    space = getattr(args, "space", None)
    if kind.in_space and space and not name.startswith(f"{space}."):
        return f"{space}.{name}"
    return name


def _targets(args, tenant: str) -> list[resources.Target]:
    """The objects named on the command line: `KIND NAME...`, `KIND/NAME...` or `-f FILE`."""
    if getattr(args, "filename", None):
        if args.names:
            raise UsageError("give either -f FILE or KIND NAME, not both")
        return [resources.of_manifest(d, tenant) for d in manifests.load(args.filename)]
    if not args.names:
        raise UsageError("give KIND NAME... (e.g. addressspace myspace) or -f FILE")
    words = list(args.names)
    if "/" in words[0]:  # kubectl's addressspace/myspace form
        pairs = [w.split("/", 1) for w in words]
        return [resources.target(kinds.lookup(k), n, tenant) for k, n in pairs]
    kind = kinds.lookup(words[0])
    if len(words) < 2:
        raise UsageError(f"give the name of the {kind.kind}")
    return [resources.target(kind, _in_space(kind, n, args), tenant) for n in words[1:]]


# commands -----------------------------------------------------------------------------------

def cmd_login(args) -> int:
    login.login(args)
    return OK


def cmd_config(args) -> int:
    cfg = config.load(env=False)
    if args.action == "set-tenant":
        if not args.value:
            raise UsageError("give the tenant: maasctl config set-tenant NAME")
        cfg.tenant = args.value
        config.save(cfg)
        print(f'Switched to tenant "{cfg.tenant}".')
    elif args.action == "current-tenant":
        if not cfg.tenant:
            raise UsageError("no current tenant")
        print(cfg.tenant)
    else:  # view
        shown = {"url": cfg.url, "tenant": cfg.tenant,
                 "token": "REDACTED" if cfg.token else "", "file": str(config.path())}
        if cfg.oidc:
            shown["oidc"] = {k: v for k, v in cfg.oidc.items() if k != "refresh_token"}
        print(output.dump(shown, "yaml"))
    return OK


def cmd_apply(args) -> int:
    docs = manifests.load(args.filename)  # a bad file stops the run before anything is sent
    # Plans are the operator's, global: a file of plans alone needs no tenant.
    client, tenant = _session(args, tenant=any(kinds.of_manifest(d).tenant_scoped
                                               for d in docs))
    code = OK
    for doc in docs:
        try:
            print(resources.apply(client, doc, tenant), flush=True)
        except ApiError as exc:
            t = resources.of_manifest(doc, tenant)
            print(f'{exc.render()}: when applying {t.ref}', file=sys.stderr, flush=True)
            code = FAILED
    return code


CONNECTION_FILTERS = ("protocol", "via", "user", "search")


def cmd_get(args) -> int:
    kind = kinds.lookup(args.kind)
    given = [f"--{k}" for k in CONNECTION_FILTERS if getattr(args, k)]
    if given and not kind.live:
        raise UsageError(f"{', '.join(given)}: only for connections")
    client, tenant = _session(args, tenant=kind.tenant_scoped)
    single = bool(args.names) and len(args.names) == 1
    if args.names:
        objects = [resources.get(client, resources.target(kind, _in_space(kind, n, args), tenant))
                   for n in args.names]
    else:
        params = {k: v for k, v in (("type", args.type), ("phase", args.phase)) if v}
        params.update({k: getattr(args, k) for k in CONNECTION_FILTERS if getattr(args, k)})
        objects = resources.list_objects(client, kind, tenant, args.space, params)
    if args.output in ("json", "yaml"):
        print(output.dump(objects[0] if single else output.as_list(objects), args.output))
    elif args.output == "name":
        for o in objects:
            print(f"{kind.ref}/{kind.name_of(o)}")
    elif not objects:
        where = f" in address space {args.space}" if args.space else ""
        print(f"No {kind.plural} found in tenant {tenant}{where}." if kind.tenant_scoped
              else f"No {kind.plural} found.", file=sys.stderr)
    else:
        print(output.objects_table(kind, objects, wide=args.output == "wide"))
    return OK


def cmd_describe(args) -> int:
    if not args.names and not args.filename:
        raise UsageError("give KIND NAME... or -f FILE")
    if args.names and len(args.names) == 1 and "/" not in args.names[0]:
        kind = kinds.lookup(args.names[0])
        client, tenant = _session(args, tenant=kind.tenant_scoped)
        objects = resources.list_objects(client, kind, tenant, args.space)
    else:
        client, targets = _scoped_targets(args)
        objects = [resources.get(client, t) for t in targets]
    print("\n\n".join(output.describe(o) for o in objects))
    return OK


def cmd_delete(args) -> int:
    client, targets = _scoped_targets(args)
    if args.filename:  # a file lists a space before its addresses: delete them first
        targets.reverse()
    for t in targets:
        line = resources.delete(client, t, ignore_not_found=args.ignore_not_found)
        if line:
            print(line, flush=True)
    if args.wait:
        resources.wait(client, targets, resources.Condition("delete"),
                       resources.duration(args.timeout), report=lambda line: None)
    return OK


def cmd_wait(args) -> int:
    client, targets = _scoped_targets(args)
    condition = resources.Condition(args.condition)
    resources.wait(client, targets, condition, resources.duration(args.timeout))
    return OK


def _messaging(args):
    client, tenant = _session(args)
    space = resources.get(client, resources.target(kinds.BY_KIND["AddressSpace"], args.space,
                                                   tenant))
    ep = messaging.endpoint(space, args.protocol, args.user)
    password = messaging.password_of(args.password)
    return client, tenant, ep, password


def _bodies(args) -> list[str]:
    if args.file:
        try:
            text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
        bodies = [text]
    else:
        bodies = [args.body]
    if args.count > 1:
        bodies = [f"{bodies[0]} {i + 1}" if args.number else bodies[0]
                  for i in range(args.count)]
    return bodies


def cmd_send(args) -> int:
    client, tenant, ep, password = _messaging(args)
    timeout = resources.duration(args.timeout)
    bodies = _bodies(args)
    if args.protocol == "mqtt":
        messaging.mqtt_send(ep, password, args.address, bodies, args.qos, timeout)
    else:
        kind, owner = ("", args.address)
        if ep.space_type == "brokered":
            kind, owner = messaging.address_type(client, tenant, args.space, args.address)
        wire = messaging.wire_address(ep.space_type, kind, owner, args.address, receiving=False)
        messaging.amqp_send(ep, password, wire, bodies, args.subject, timeout)
    print(f"sent {len(bodies)} message(s) to {args.address}", file=sys.stderr)
    return OK


def cmd_receive(args) -> int:
    client, tenant, ep, password = _messaging(args)
    timeout = resources.duration(args.timeout)
    as_json = args.output == "json"
    if args.protocol == "mqtt":
        messaging.mqtt_receive(ep, password, args.address, args.count, args.qos, timeout,
                               as_json)
        return OK
    kind, owner = ("", args.address)
    if ep.space_type == "brokered":
        kind, owner = messaging.address_type(client, tenant, args.space, args.address)
    wire = messaging.wire_address(ep.space_type, kind, owner, args.address, receiving=True)
    messaging.amqp_receive(ep, password, wire, args.count, timeout, as_json)
    return OK


def cmd_usage(args) -> int:
    client, tenant = _session(args)
    params = {k: v for k, v in (("from", args.since), ("to", args.until),
                                ("granularity", args.granularity), ("space", args.space)) if v}
    if args.output == "csv":
        response = client.request("GET", f"tenants/{tenant}/usage/",
                                  params={**params, "export": "csv"})
        sys.stdout.write(response.text)
        return OK
    report = client.get(f"tenants/{tenant}/usage/", params)
    if args.output in ("json", "yaml"):
        print(output.dump(report, args.output))
        return OK
    print(output.usage_text(report))
    return OK


# parser -------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = Parser(prog="maasctl", description="The command-line client of MaaS "
               "(EnMasse-style messaging as a service). Exit codes: 0 ok, 1 error from the "
               "server or a failed operation, 2 bad usage, 3 timed out, 4 unreachable.")
    p.add_argument("--version", action="version", version=f"maasctl {__version__}")
    _globals(p)  # before the command too (`maasctl -n acme get as`), as kubectl takes them
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    s = sub.add_parser("login", help="sign in to a MaaS API and remember it")
    _globals(s)
    s.add_argument("--token-stdin", action="store_true", help="read the token from stdin")
    s.add_argument("--issuer", help="OpenID provider (issuer URL) for the device or browser flow")
    s.add_argument("--client-id", default="maasctl", help="the provider's client for maasctl")
    s.add_argument("--scope", default="openid profile email",
                   help="add offline_access where the provider needs it for a refresh token")
    s.add_argument("--browser", action="store_true",
                   help="sign in in a browser (authorization code with PKCE) instead of the "
                        "device flow")
    s.set_defaults(func=cmd_login)

    s = sub.add_parser("config", help="view the settings or switch the current tenant")
    s.add_argument("action", choices=["view", "set-tenant", "current-tenant"])
    s.add_argument("value", nargs="?")
    s.set_defaults(func=cmd_config)

    s = sub.add_parser("apply", help="create or update objects from manifests (-f FILE|DIR|-)")
    _globals(s)
    s.add_argument("-f", "--filename", action="append", required=True)
    s.set_defaults(func=cmd_apply)

    s = sub.add_parser("get", help="list objects, or show some")
    _globals(s)
    s.add_argument("kind")
    s.add_argument("names", nargs="*", default=[])
    s.add_argument("-o", "--output", choices=["wide", "yaml", "json", "name"])
    s.add_argument("--space", "-s", help="addresses, users or connections of one address "
                                         "space")
    s.add_argument("--type", help="only this type (addresses, address spaces, plans)")
    s.add_argument("--phase", help="only this phase (addresses, address spaces)")
    s.add_argument("--protocol", choices=["amqp", "amqps", "mqtt", "mqtts", "amqp-0-9-1"],
                   help="only connections of this protocol")
    s.add_argument("--via", choices=["router", "gateway", "broker"],
                   help="only connections through this part of the data plane")
    s.add_argument("--user", help="only this messaging user's connections")
    s.add_argument("--search", help="only connections with this text in their host, "
                                    "container id or user")
    s.set_defaults(func=cmd_get)

    s = sub.add_parser("describe", help="show objects' spec and status readably")
    _globals(s)
    s.add_argument("names", nargs="*", default=[], metavar="KIND [NAME...]")
    s.add_argument("-f", "--filename", action="append")
    s.add_argument("--space", "-s", help="NAME is an address, user or connection of this "
                                         "space")
    s.set_defaults(func=cmd_describe)

    s = sub.add_parser("delete", help="delete objects (KIND NAME... or -f FILE), or close "
                                      "connections")
    _globals(s)
    s.add_argument("names", nargs="*", default=[], metavar="KIND NAME")
    s.add_argument("-f", "--filename", action="append")
    s.add_argument("--space", "-s", help="NAME is an address, user or connection of this "
                                         "space")
    s.add_argument("--ignore-not-found", action="store_true")
    s.add_argument("--wait", action="store_true", help="until they are gone")
    s.add_argument("--timeout", default="60s")
    s.set_defaults(func=cmd_delete)

    s = sub.add_parser("wait", help="wait until objects reach a phase, are ready or are gone")
    _globals(s)
    s.add_argument("names", nargs="*", default=[], metavar="KIND NAME")
    s.add_argument("-f", "--filename", action="append")
    s.add_argument("--space", "-s", help="NAME is an address, user or connection of this "
                                         "space")
    s.add_argument("--for", dest="condition", required=True,
                   help="phase=Active, condition=Ready or delete")
    s.add_argument("--timeout", default="30s", help="e.g. 60s, 2m (default 30s)")
    s.set_defaults(func=cmd_wait)

    for name, text in (("send", "send messages to an address as a messaging user"),
                       ("receive", "receive messages from an address as a messaging user")):
        s = sub.add_parser(name, help=text)
        _globals(s)
        s.add_argument("address", help="the address (spec.address), e.g. orders, news/sports")
        s.add_argument("--space", "-s", required=True, help="the address space")
        s.add_argument("--user", "-u", required=True, help="the messaging user's username")
        s.add_argument("--password", "-p", help="or set MAASCTL_PASSWORD")
        s.add_argument("--protocol", choices=["amqp", "mqtt"], default="amqp")
        s.add_argument("--count", "-c", type=int, default=1)
        s.add_argument("--timeout", default="10s")
        s.add_argument("--qos", type=int, choices=[0, 1], default=1, help="MQTT QoS")
        if name == "send":
            s.add_argument("--body", "-b", default="hello")
            s.add_argument("--file", help="send this file's text as the body (- for stdin)")
            s.add_argument("--subject", help="AMQP subject (a topic's routing key)")
            s.add_argument("--number", action="store_true",
                           help='with --count, number the bodies ("hello 1", "hello 2", ...)')
            s.set_defaults(func=cmd_send)
        else:
            s.add_argument("-o", "--output", choices=["text", "json"], default="text",
                           help="json: one object per message (body, subject, properties)")
            s.set_defaults(func=cmd_receive)

    s = sub.add_parser("usage", help="the tenant's metered usage and quota state")
    _globals(s)
    s.add_argument("--from", dest="since", help="first day, YYYY-MM-DD (default: 6 days ago)")
    s.add_argument("--to", dest="until", help="last day, YYYY-MM-DD (default: today)")
    s.add_argument("--granularity", choices=["daily", "hourly"])
    s.add_argument("--space", "-s")
    s.add_argument("-o", "--output", choices=["table", "json", "yaml", "csv"], default="table")
    s.set_defaults(func=cmd_usage)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    try:
        args = p.parse_args(argv)
        if not getattr(args, "func", None):
            p.print_help(sys.stderr)
            return USAGE
        if getattr(args, "count", 1) < 1:
            raise UsageError("--count must be at least 1")
        return args.func(args)
    except CliError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return OK

