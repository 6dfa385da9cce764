"""The config log's models now belong to the eventlog app (eventlog/migrations/0001_initial.py):
only Django's state changes, the tables stay."""
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('config_service', '0007_agentstate_checked_at'),
        ('eventlog', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.AlterField(
                model_name='appliedevent',
                name='event',
                field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='applied', to='eventlog.configevent'),
            ),
            migrations.DeleteModel(name='Outbox'),
            migrations.DeleteModel(name='ConfigEvent'),
            migrations.DeleteModel(name='EventStream'),
        ]),
    ]
