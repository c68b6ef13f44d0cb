"""Fleet registry, card-hour weighting, hot-shape selection and weight drift."""
