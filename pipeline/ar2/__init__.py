"""AR2 (adversarial retriever-ranker) rounds on sieved or unsieved negatives, round selection and curves."""
