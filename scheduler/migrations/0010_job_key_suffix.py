from django.db import migrations, models

import scheduler.models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0009_job_kinds_tpu_slices_ray_reports"),
    ]

    operations = [
        # Jobs that exist keep an empty suffix, so the names their clusters know them by do not change under
        # them; jobs made from now on get random letters (the default below).
        migrations.AddField(
            model_name="job",
            name="key_suffix",
            field=models.CharField(blank=True, default="", editable=False, max_length=8),
        ),
        migrations.AlterField(
            model_name="job",
            name="key_suffix",
            field=models.CharField(
                blank=True, default=scheduler.models.key_suffix, editable=False, max_length=8
            ),
        ),
    ]
