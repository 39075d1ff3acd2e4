"""URL routes of the Django deployment example."""

from __future__ import annotations

from django.urls import path

from django_site import views

urlpatterns = [
    path("conversations/<str:cid>/messages", views.post_message),
    path("conversations/<str:cid>", views.get_conversation),
    path("conversations/<str:cid>/cancel", views.cancel),
]
