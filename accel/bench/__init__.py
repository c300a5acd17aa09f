"""`accel bench`: train a model for a few steps in every precision that runs here and compare them."""
