"""The fit stage (`mars fit`): every question's arrays and switch model, fitted once
(:mod:`mars.fit.driver`), written as a fit directory that simulations read
(:mod:`mars.fit.fitdir`)."""
