"""Database connections prepare the statements they run again and again (maas/settings.py,
`MAAS_DB_PREPARED_STATEMENTS`): PostgreSQL then neither parses nor plans them anew, which cut
its CPU per address create by about a third (docs/scale.md, "Prepared statements")."""
import json
import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from config_service.models import AddressSpace

PROBE = """
import json, django
django.setup()
from django.db import connection
from config_service.models import AddressSpace
for _ in range(6):
    list(AddressSpace.objects.filter(name="nothing-by-that-name"))
with connection.cursor() as cursor:
    cursor.execute("SELECT count(*) FROM pg_prepared_statements")
    print(json.dumps({"prepared": cursor.fetchone()[0]}))
"""


@pytest.mark.django_db
def test_a_statement_run_a_sixth_time_on_a_connection_is_prepared():
    def run():
        list(AddressSpace.objects.filter(name__endswith="-prepared-probe"))

    def prepared():
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements")
            return [row[0] for row in cursor.fetchall() if "LIKE" in row[0]]

    for _ in range(4):
        run()
    before = prepared()
    for _ in range(2):
        run()

    assert before == []  # four runs: planned each time
    assert any("config_service_addressspace" in s for s in prepared())


@pytest.mark.parametrize("setting,prepared", [("true", True), ("false", False)])
def test_the_setting_turns_them_on_and_off(setting, prepared):
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="maas.settings", MAAS_LOG_LEVEL="WARNING",
               MAAS_DB_PREPARED_STATEMENTS=setting,
               DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}")
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=settings.BASE_DIR, env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    count = json.loads(out.stdout.strip().splitlines()[-1])["prepared"]
    assert (count > 0) is prepared
