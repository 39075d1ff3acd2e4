"""The Django project of the chat example."""
