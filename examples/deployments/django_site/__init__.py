"""The JSON chat API of ``flask_app.py`` as a Django project (WSGI): see ``settings.py``."""
