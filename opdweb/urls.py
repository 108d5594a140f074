from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, reverse_lazy

from opdweb.api import Api
from opdweb.budgets import api as budgets_api
from opdweb.health import views as health
from opdweb.home import views as home_views
from opdweb.jobs import api as jobs_api
from opdweb.runs import api as runs_api
from opdweb.tokens.authentication import authenticate_bearer

api = Api(title="opdweb", version="1", routes=[jobs_api.routes, budgets_api.routes, runs_api.routes],
          bearer=authenticate_bearer)

urlpatterns = [
    path("", home_views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # An invited user's one-time link (teams.actions.do_invite_user): Django's password reset token.
    path("set-password/<uidb64>/<token>/", auth_views.PasswordResetConfirmView.as_view(
        template_name="registration/set_password.html", success_url=reverse_lazy("login")), name="set_password"),
    path("jobs/", include("opdweb.jobs.urls")),
    path("budgets/", include("opdweb.budgets.urls")),
    path("", include("opdweb.rollouts.urls")),
    path("", include("opdweb.approvals.urls")),
    path("teams/", include("opdweb.teams.urls")),
    path("models/", include("opdweb.registry.urls")),
    path("tokens/", include("opdweb.tokens.urls")),
    # MLflow's tracking API, for trainers' MLflow loggers (MLFLOW_TRACKING_URI=<here>/mlflow).
    path("mlflow/", include("opdweb.runs.urls")),
    # W&B's API, for trainers' wandb clients (WANDB_BASE_URL=<here>/wandb).
    path("wandb/", include("opdweb.runs.wandb_urls")),
    path("runs/", include("opdweb.runs.page_urls")),
    path("status/", health.status_page, name="status"),
    path("healthz", health.healthz, name="healthz"),
    path("api/", include(api.urls())),
    path("admin/", admin.site.urls),
]

# JSON answers under /api/, Django's pages elsewhere.
handler400 = "opdweb.api.errors.bad_request"
handler403 = "opdweb.api.errors.permission_denied"
handler404 = "opdweb.api.errors.not_found"
handler500 = "opdweb.api.errors.server_error"
