"""manage.py run_usage_job --day YYYY-MM-DD: run the usage rollups and quota check for a day."""
import datetime

from django.core.management.base import BaseCommand, CommandError

from workers.usage.job import run_day


class Command(BaseCommand):
    help = "Run the nightly Spark usage job for one day (re-running replaces that day)."

    def add_arguments(self, parser):
        parser.add_argument("--day", required=True, help="YYYY-MM-DD")

    def handle(self, day, **options):
        try:
            when = datetime.date.fromisoformat(day)
        except ValueError as exc:
            raise CommandError("--day must be YYYY-MM-DD") from exc
        run = run_day(when)
        if run is None:
            raise CommandError("another usage job is running: try again when it has finished")
        self.stdout.write(f"{run.day}: {run.status} in {run.seconds:.1f}s, rows {run.rows}")
