"""Give every team that has none its queue (new teams get one when they are created)."""

from typing import Any

from django.db import migrations


def team_queues(apps: Any, schema_editor: Any) -> None:
    Team = apps.get_model("portal", "Team")
    Queue = apps.get_model("scheduler", "Queue")
    for team in Team.objects.all():
        if not Queue.objects.filter(team=team, project=None).exists():
            Queue.objects.create(team=team, project=None, name=team.slug)


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0001_initial")]

    operations = [migrations.RunPython(team_queues, migrations.RunPython.noop)]
