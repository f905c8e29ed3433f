from django.urls import path

from console.replay import views

app_name = "replay"
urlpatterns = [
    path("", views.job_list, name="jobs"),
    path("new/", views.job_new, name="new"),
    path("jobs/<int:job_id>/", views.job_detail, name="job"),
    path("jobs/<int:job_id>/pause/", views.job_pause, name="job_pause"),
    path("jobs/<int:job_id>/resume/", views.job_resume, name="job_resume"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel, name="job_cancel"),
    path("letters/<int:letter_id>/resend/", views.letter_resend, name="resend"),
    path("schedules/", views.schedule_list, name="schedules"),
    path("schedules/new/", views.schedule_edit, name="schedule_new"),
    path("schedules/<int:policy_id>/", views.schedule_edit, name="schedule_edit"),
    path("schedules/<int:policy_id>/delete/", views.schedule_delete, name="schedule_delete"),
    path("retention/", views.retention, name="retention"),
    path("retention/purge/", views.retention_purge, name="retention_purge"),
]
