"""Release bundles: manifest, weight versions, sealed provenance and roofline, keyed problem ids."""
