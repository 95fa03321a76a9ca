"""The study dashboards, served by the API app under ``/ui``.

``router`` (prefix ``/ui``) holds the pages and plotly.js; ``mount_static(app)`` serves the CSS
and the chart script. The app includes both and sets ``app.state.repo`` (and, for Optuna's
parameter importances, ``app.state.storage_url``); see :mod:`api.dashboards.routes`.
Numbers come from :mod:`tuner.results.report`; the templates only draw them.
"""

from api.dashboards.assets import mount_static
from api.dashboards.routes import router

__all__ = ["mount_static", "router"]
