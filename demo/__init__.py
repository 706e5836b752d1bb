"""The demo: ``manage.py demo`` (web server, worker and beat under a supervisor) and the seed data of each app."""
