#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replay_site.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as error:
        # A setting the operator gave wrong (settings.py names the variable and the value): the
        # message is the whole story, a traceback through Django's start-up only hides it.
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
