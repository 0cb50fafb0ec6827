"""The dashboard's pages, one module per page family (sessions: the list, upload and player;
imports, diff, search, teams, tours, sharing, comments, reviews, redactions, ...); pages.py holds
what they share."""
