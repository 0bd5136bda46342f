"""Patterns of rules: Crawlbot's URL patterns and regexes, rules files' bounded regexes."""
