"""Built-in defaults that need no download: the tiny model and the search-call task."""
