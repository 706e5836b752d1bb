"""Job pages, included from ``portal/urls.py`` under ``jobs/``."""

from django.urls import path

from scheduler.web import views

urlpatterns = [
    path("", views.job_list, name="job-list"),
    path("rows/", views.job_rows, name="job-rows"),
    path("new/", views.job_new, name="job-new"),
    path("new/preview/", views.job_preview, name="job-preview"),
    path("<int:pk>/", views.job_detail, name="job-detail"),
    path("<int:pk>/state/", views.job_state, name="job-state"),
    path("<int:pk>/cancel/", views.job_cancel, name="job-cancel"),
    path("<int:pk>/preempt/", views.job_preempt, name="job-preempt"),
    path("<int:pk>/requeue/", views.job_requeue, name="job-requeue"),
    path("<int:pk>/clone/", views.job_clone, name="job-clone"),
    path("queues/", views.queue_list, name="queue-list"),
    path("queues/rows/", views.queue_rows, name="queue-rows"),
    path("queues/<int:pk>/", views.queue_detail, name="queue-detail"),
    path("queues/<int:pk>/state/", views.queue_state, name="queue-state"),
]
