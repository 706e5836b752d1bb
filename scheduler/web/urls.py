"""Job pages, included from ``portal/urls.py`` under ``jobs/``."""

from django.urls import path

from scheduler.web import arrays, utilization, views

urlpatterns = [
    path("", views.job_list, name="job-list"),
    path("rows/", views.job_rows, name="job-rows"),
    path("new/", views.job_new, name="job-new"),
    path("new/preview/", views.job_preview, name="job-preview"),
    path("<int:pk>/", views.job_detail, name="job-detail"),
    path("<int:pk>/state/", views.job_state, name="job-state"),
    path("<int:pk>/output/", views.job_output, name="job-output"),
    path("<int:pk>/debug/", views.job_debug, name="job-debug"),
    path("<int:pk>/open/", views.job_open, name="job-open"),
    path("<int:pk>/cancel/", views.job_cancel, name="job-cancel"),
    path("<int:pk>/preempt/", views.job_preempt, name="job-preempt"),
    path("<int:pk>/requeue/", views.job_requeue, name="job-requeue"),
    path("<int:pk>/clone/", views.job_clone, name="job-clone"),
    path("<int:pk>/utilization/", utilization.job_utilization, name="job-utilization"),
    path("arrays/<int:pk>/", arrays.array_detail, name="array-detail"),
    path("arrays/<int:pk>/cancel/", arrays.array_cancel, name="array-cancel"),
    path("arrays/<int:pk>/requeue/", arrays.array_requeue, name="array-requeue"),
    path("efficiency/<int:pk>/", utilization.team_efficiency, name="team-efficiency"),
    path("queues/", views.queue_list, name="queue-list"),
    path("queues/rows/", views.queue_rows, name="queue-rows"),
    path("queues/<int:pk>/", views.queue_detail, name="queue-detail"),
    path("queues/<int:pk>/state/", views.queue_state, name="queue-state"),
]
