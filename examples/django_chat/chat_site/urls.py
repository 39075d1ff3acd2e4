"""URL routes of the chat example."""

from __future__ import annotations

from chat import views
from django.urls import path

urlpatterns = [
    path("", views.index, name="index"),
    path("chat", views.chat, name="chat"),
    path("cancel", views.cancel, name="cancel"),
    path("history", views.history, name="history"),
]
