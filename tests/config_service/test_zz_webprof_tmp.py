"""TEMPORARY: profile of API creates (not committed)."""
import cProfile
import io
import os
import pstats
import time

from config_service import services
from tests.conftest import CTX


def test_profile(tenant, api):
    std = services.create_address_space(ctx=CTX, tenant=tenant, name="ss", type="standard",
                                        plan="standard-unlimited")
    url = f"/api/v1/tenants/{tenant.slug}/addressspaces/{std.name}/addresses/"
    prof = cProfile.Profile()
    cpu = []
    on = os.environ.get("PROF") == "1"
    for i in range(400):
        body = {"metadata": {"name": f"ss.a{i}"},
                "spec": {"address": f"a{i}", "type": "anycast", "plan": "standard-small-anycast"}}
        c = time.process_time()
        if on:
            prof.enable()
        r = api.post(url, body, format="json")
        if on:
            prof.disable()
        cpu.append(time.process_time() - c)
        assert r.status_code == 201, r.content
    cpu.sort()
    print("\nCPU median ms", cpu[len(cpu) // 2] * 1000)
    if on:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(90)
        print(out.getvalue())
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue())
