from django.db import migrations


class Migration(migrations.Migration):
    """`last_resync_at`, never written, becomes `checked_at`: when the agent last compared the
    whole space with its target, the drift check's clock (workers/tasks.py)."""

    dependencies = [
        ("config_service", "0006_address_unscheduled"),
    ]

    operations = [
        migrations.RenameField(model_name="agentstate", old_name="last_resync_at",
                               new_name="checked_at"),
    ]
