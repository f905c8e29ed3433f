from django.urls import path

from console.archive import views

app_name = "archive"
urlpatterns = [
    path("", views.dead_letter_list, name="list"),
    path("<int:letter_id>/", views.dead_letter_detail, name="detail"),
    path("discard/", views.dead_letters_discard, name="discard"),
]
