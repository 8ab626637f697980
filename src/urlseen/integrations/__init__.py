"""Crawler integrations: urlseen as the seen-test inside a crawler: Scrapy (and scrapy-redis,
scrapy-redis-bloomfilter) in scrapy.py, Crawlee for Python in crawlee.py."""
