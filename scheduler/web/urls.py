"""Job pages, included from ``portal/urls.py`` under ``jobs/``."""

from django.urls import path

from scheduler.web import arrays, utilization, views

urlpatterns = [
    path("", views.job_list, name="job-list"),
    path("rows/", views.job_rows, name="job-rows"),
    path("new/", views.job_new, name="job-new"),
    path("new/preview/", views.job_preview, name="job-preview"),
    path("<id:pk>/", views.job_detail, name="job-detail"),
    path("<id:pk>/state/", views.job_state, name="job-state"),
    path("<id:pk>/output/", views.job_output, name="job-output"),
    path("<id:pk>/debug/", views.job_debug, name="job-debug"),
    path("<id:pk>/open/", views.job_open, name="job-open"),
    path("<id:pk>/cancel/", views.job_cancel, name="job-cancel"),
    path("<id:pk>/preempt/", views.job_preempt, name="job-preempt"),
    path("<id:pk>/requeue/", views.job_requeue, name="job-requeue"),
    path("<id:pk>/clone/", views.job_clone, name="job-clone"),
    path("<id:pk>/utilization/", utilization.job_utilization, name="job-utilization"),
    path("arrays/<id:pk>/", arrays.array_detail, name="array-detail"),
    path("arrays/<id:pk>/cancel/", arrays.array_cancel, name="array-cancel"),
    path("arrays/<id:pk>/requeue/", arrays.array_requeue, name="array-requeue"),
    path("efficiency/<id:pk>/", utilization.team_efficiency, name="team-efficiency"),
    path("queues/", views.queue_list, name="queue-list"),
    path("queues/rows/", views.queue_rows, name="queue-rows"),
    path("queues/<id:pk>/", views.queue_detail, name="queue-detail"),
    path("queues/<id:pk>/state/", views.queue_state, name="queue-state"),
]
