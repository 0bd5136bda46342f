"""Small real sites the crawler tests crawl."""
