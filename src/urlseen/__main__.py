"""`python -m urlseen` runs the command line."""

from urlseen.cli import main

main()
