from django.urls import path

from console.archive import views as archive_views
from console.clusters import views

app_name = "clusters"
urlpatterns = [
    path("", views.cluster_list, name="list"),
    path("add/", views.cluster_add, name="add"),
    path("<int:cluster_id>/", views.cluster_detail, name="detail"),
    path("<int:cluster_id>/edit/", views.cluster_edit, name="edit"),
    path("<int:cluster_id>/delete/", views.cluster_delete, name="delete"),
    path("<int:cluster_id>/test/", views.cluster_test, name="test"),
    path("<int:cluster_id>/subscriptions/register/", views.subscription_register, name="register"),
    path("<int:cluster_id>/rebuild/", views.subscription_rebuild, name="rebuild"),
    path("<int:cluster_id>/peek/", views.retry_queue_peek, name="peek"),
    path("<int:cluster_id>/collect/", archive_views.dead_letters_collect, name="collect"),
]
