"""The config log's models, moved from config_service into an app of their own: only Django's
state changes, the tables (and their names) stay as they were."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('tenants', '0005_plan_router_policy'),
        ('config_service', '0007_agentstate_checked_at'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
                migrations.CreateModel(
                    name='EventStream',
                    fields=[
                        ('uid', models.UUIDField(primary_key=True, serialize=False)),
                        ('kind', models.CharField(max_length=20)),
                        ('last_sequence', models.PositiveIntegerField(default=0)),
                        ('tenant', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant')),
                    ],
                    options={
                        'db_table': 'config_service_eventstream',
                    },
                ),
                migrations.CreateModel(
                    name='ConfigEvent',
                    fields=[
                        ('position', models.BigAutoField(primary_key=True, serialize=False)),
                        ('sequence', models.PositiveIntegerField()),
                        ('type', models.CharField(max_length=60)),
                        ('schema_version', models.PositiveSmallIntegerField(default=1)),
                        ('payload', models.JSONField()),
                        ('actor', models.CharField(max_length=200)),
                        ('request_id', models.CharField(blank=True, max_length=64)),
                        ('created_at', models.DateTimeField(db_index=True)),
                        ('tenant', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant')),
                        ('stream', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='events', to='eventlog.eventstream')),
                    ],
                    options={
                        'db_table': 'config_service_configevent',
                        'ordering': ['position'],
                    },
                ),
                migrations.CreateModel(
                    name='Outbox',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('stream_uid', models.UUIDField(db_index=True)),
                        ('sequence', models.PositiveIntegerField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('attempts', models.PositiveIntegerField(default=0)),
                        ('last_sent_at', models.DateTimeField(blank=True, null=True)),
                        ('acked_at', models.DateTimeField(blank=True, null=True)),
                        ('event', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='outbox', to='eventlog.configevent')),
                    ],
                    options={
                        'db_table': 'config_service_outbox',
                    },
                ),
                migrations.AddIndex(
                    model_name='configevent',
                    index=models.Index(fields=['tenant', 'position'], name='config_serv_tenant__b7d237_idx'),
                ),
                migrations.AddConstraint(
                    model_name='configevent',
                    constraint=models.UniqueConstraint(fields=('stream', 'sequence'), name='one_event_per_sequence'),
                ),
                migrations.AddIndex(
                    model_name='outbox',
                    index=models.Index(condition=models.Q(('acked_at__isnull', True)), fields=['created_at'], name='outbox_pending'),
                ),
        ]),
    ]
