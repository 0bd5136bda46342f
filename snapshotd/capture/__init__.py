"""One capture of one claimed path: render, judge, store."""
