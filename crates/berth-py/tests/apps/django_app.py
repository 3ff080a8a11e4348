"""A Django project in one file, configured the way ``settings.configure`` allows: a view that
echoes ``request.body`` (what Django users read), served as ``apps.django_app:application``
(Django's own WSGI handler)."""

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="berth-tests-only",
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["*"],
    MIDDLEWARE=[],
    INSTALLED_APPS=[],
)
django.setup()

from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402


def echo(request):
    return HttpResponse(request.body, content_type="application/octet-stream",
                        headers={"X-Method": request.method})


urlpatterns = [path("echo", echo)]

application = get_wsgi_application()
