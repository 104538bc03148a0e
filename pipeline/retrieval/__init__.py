"""Retrieval: BM25, the bi-encoder and cross-encoder models, sharded corpus encoding, FAISS index,
search and retrieval runs."""
