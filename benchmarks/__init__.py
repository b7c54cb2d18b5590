"""Benchmark and data scripts of spacy-elmo (corpus builder, dataset loaders, fetchers)."""
