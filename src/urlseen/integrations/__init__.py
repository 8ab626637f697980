"""Crawler integrations: urlseen as the seen-test inside a crawler (Scrapy for now)."""
