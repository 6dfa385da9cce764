from django.db import migrations


def forwards(apps, schema_editor):
    from tenants.default_plans import install

    install(apps.get_model("tenants", "AddressPlan"), apps.get_model("tenants", "AddressSpacePlan"))


class Migration(migrations.Migration):
    dependencies = [("tenants", "0001_initial")]
    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
