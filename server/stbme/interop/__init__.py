"""Moving memories in and out: our export format and graphs exported by the original ST-BME extension."""
