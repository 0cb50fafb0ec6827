import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
application = get_wsgi_application()

from replay_site.serving import require_real_secret_key, require_signing_key, tune_garbage_collector  # noqa: E402

require_real_secret_key()
require_signing_key()
tune_garbage_collector()
