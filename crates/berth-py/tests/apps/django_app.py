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
    # Django's own limit on a body read into memory (2.5 MB by default, its 400 beyond), set
    # as a site taking uploads sets it: the tests' 10 MB uploads are the server's to pass.
    DATA_UPLOAD_MAX_MEMORY_SIZE=64 * 1024 * 1024,
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
