from django.urls import path

from console.analytics import api

app_name = "analytics-api"
urlpatterns = [
    path("runs/", api.PipelineRunList.as_view(), name="runs"),
    path("runs/<int:run_id>/", api.PipelineRunDetail.as_view(), name="run"),
    path("overview/", api.FailureOverviewList.as_view(), name="overview"),
    path("retry-histogram/", api.RetryHistogramList.as_view(), name="retry-histogram"),
    path("time-to-dlq/", api.TimeToDlqList.as_view(), name="time-to-dlq"),
    path("reasons/", api.FailureReasonList.as_view(), name="reasons"),
    path("duplicates/", api.DuplicateGroupList.as_view(), name="duplicates"),
    path("replay-candidates/", api.ReplayCandidatesView.as_view(), name="replay-candidates"),
]
