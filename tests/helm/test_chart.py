"""The Helm chart (helm/countersign), linted, rendered and validated offline.

Run by tests/helm/run.sh (which makes the venv): helm-python-sdk lints and renders
with Helm's own Go code (no helm binary, no cluster), kubernetes-validate checks every
rendered object against the pinned Kubernetes version's OpenAPI schemas (strict: an
unknown field fails), and the assertions pin what the deployment relies on.
"""

from __future__ import annotations

import re
import sys
import tomllib
import unittest
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "countersign"
PRODUCTION = Path(__file__).resolve().parent / "values-production.yaml"
# The Kubernetes version the manifests are validated against (native gRPC probes are
# GA since 1.27; the chart's kubeVersion says >=1.27).
KUBERNETES = "1.31.0"
RELEASE = "countersign"
NAMESPACE = "countersign"
GRPC_PORT = 50051
METRICS_PORT = 9464
CONFIG_PATH = "/etc/countersign/countersign.toml"

# What the Secrets of an install would hold. Each is offered to the chart as a value
# (under the keys an operator might try) and must be refused; none may ever appear
# in a rendered manifest.
SENTINELS = {
    "database_url": "postgres://countersign_app:SENTINEL-pg-app-pw-7f3a@db:5432/countersign",
    "migrate_url": "postgres://countersign_owner:SENTINEL-pg-owner-pw-91c2@db:5432/countersign",
    "redis_url": "redis://:SENTINEL-redis-pw-55de@redis:6379/0",
    "signing_key": "5e" * 32,
}

# Exactly the keys of countersign.toml the loader accepts from the chart.
TOML_KEYS = {
    "listen",
    "log.format",
    "metrics.listen",
    "console.enabled",
    "shutdown.grace",
    "database.pool",
    "redis.prefix",
    "review.workers",
    "review.express_workers",
    "review.deadline",
    "review.attempts",
    "review.lease",
}

SECRET_ENV = re.compile(r"^COUNTERSIGN_.*(_URL|_KEY)$")
# Credentials inside a URL (scheme://user:password@host) or a 64-hex-digit seed.
SECRET_LOOKING = [
    re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@\"']*:[^@\s\"']+@"),
    re.compile(r"\b[0-9a-fA-F]{64}\b"),
    re.compile(r"SENTINEL"),
]


def production_values() -> dict:
    return yaml.safe_load(PRODUCTION.read_text())


def merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def render_text(values: dict | None = None) -> dict[str, str]:
    """Template path -> rendered text, as `helm install` would render it."""
    with helm.Chart.load(CHART) as chart:
        return chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)


def render(values: dict | None = None) -> list[dict]:
    """Every object the chart renders (NOTES.txt is text, not a manifest)."""
    objects = []
    for path, text in render_text(values).items():
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict], kind: str, name: str) -> dict:
    found = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name}, found {len(found)}")
    return found[0]


def pod_specs(objects: list[dict]) -> list[tuple[str, dict]]:
    """(kind/name, pod spec) of every Deployment and Job."""
    return [
        (f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"])
        for o in objects
        if o["kind"] in ("Deployment", "Job")
    ]


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def toml_keys(table: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in table.items():
        path = f"{prefix}{key}"
        keys |= toml_keys(value, f"{path}.") if isinstance(value, dict) else {path}
    return keys


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


class RenderedScenarios(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.values = {"defaults": {}, "production": production_values()}
        cls.rendered = {name: render(values or None) for name, values in cls.values.items()}
        cls.texts = {
            name: render_text(values or None) for name, values in cls.values.items()
        }

    def expected(self, scenario: str) -> dict:
        """The merged values a scenario was rendered with."""
        with helm.Chart.load(CHART) as chart:
            return chart.merge_values(self.values[scenario] or None)


class TheChartLints(unittest.TestCase):
    def test_the_chart_lints_clean_with_defaults_and_production_values(self):
        for name, values in (("defaults", None), ("production", production_values())):
            with self.subTest(values=name):
                report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBERNETES}")
                self.assertEqual(report["total_charts_linted"], 1)
                self.assertEqual(report["errors"], [])
                problems = [m for m in report["messages"] if m["severity"] >= 2]
                self.assertEqual(problems, [], f"lint warnings or errors: {problems}")


class TheValuesAreDocumented(unittest.TestCase):
    # Maps whose entries are Kubernetes fields, documented once on the map itself.
    FREE_FORM = {"podSecurityContext", "securityContext", "resources"}

    def test_every_value_in_values_yaml_has_a_comment(self):
        lines = (CHART / "values.yaml").read_text().splitlines()
        ancestors: list[tuple[int, bool]] = []  # (indent, documented free-form map)
        undocumented = []
        for number, line in enumerate(lines, start=1):
            match = re.match(r"^(\s*)([A-Za-z][\w.-]*):(.*)$", line)
            if not match:
                continue
            indent, key, rest = len(match[1]), match[2], match[3].strip()
            while ancestors and ancestors[-1][0] >= indent:
                ancestors.pop()
            commented = number > 1 and lines[number - 2].strip().startswith("#")
            covered = any(free for _, free in ancestors)
            if rest and not commented and not covered:
                undocumented.append(f"line {number}: {line.strip()}")
            ancestors.append((indent, covered or (commented and key in self.FREE_FORM)))
        self.assertEqual(undocumented, [])

    def test_the_schema_admits_the_defaults_and_the_production_values(self):
        with helm.Chart.load(CHART) as chart:
            self.assertIsNotNone(chart.schema)
            chart.validate_schema(None)
            chart.validate_schema(production_values())


class EveryManifestIsValid(RenderedScenarios):
    def test_every_rendered_manifest_passes_strict_kubernetes_validation(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                self.assertGreater(len(objects), 5)
                for obj in objects:
                    if obj["apiVersion"].startswith("monitoring.coreos.com/"):
                        continue  # a CRD: no schema in kubernetes-validate; checked below
                    try:
                        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
                    except kubernetes_validate.ValidationError as error:
                        where = f"{obj['kind']}/{obj['metadata']['name']}"
                        self.fail(f"{name}: {where}: {error.message}")

    def test_the_service_monitor_scrapes_the_metrics_port_of_both_services(self):
        objects = self.rendered["production"]
        (monitor,) = of_kind(objects, "ServiceMonitor")
        self.assertEqual(monitor["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(monitor["metadata"]["labels"]["release"], "kube-prometheus-stack")
        self.assertEqual(set(monitor), {"apiVersion", "kind", "metadata", "spec"})
        self.assertEqual(set(monitor["spec"]), {"selector", "endpoints"})
        for endpoint in monitor["spec"]["endpoints"]:
            self.assertLessEqual(
                set(endpoint), {"port", "path", "interval", "scrapeTimeout"}
            )
            self.assertEqual(endpoint["port"], "metrics")
            self.assertEqual(endpoint["path"], "/metrics")
            self.assertRegex(endpoint["interval"], r"^[0-9]+(s|m)$")
        selector = monitor["spec"]["selector"]["matchLabels"]
        selected = {
            s["metadata"]["name"]
            for s in of_kind(objects, "Service")
            if selector.items() <= s["metadata"]["labels"].items()
            and any(p["name"] == "metrics" for p in s["spec"]["ports"])
        }
        self.assertEqual(selected, {f"{RELEASE}-api", f"{RELEASE}-worker-metrics"})


class TheDeployments(RenderedScenarios):
    def test_api_and_worker_serve_their_role_with_the_config_file(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                for role in ("api", "worker"):
                    deployment = named(objects, "Deployment", f"{RELEASE}-{role}")
                    (container,) = deployment["spec"]["template"]["spec"]["containers"]
                    self.assertEqual(
                        container["args"], ["serve", "--role", role, "--config", CONFIG_PATH]
                    )
                    mounts = {m["name"]: m for m in container["volumeMounts"]}
                    self.assertTrue(CONFIG_PATH.startswith(mounts["config"]["mountPath"] + "/"))
                    self.assertTrue(mounts["config"]["readOnly"])
                    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
                    self.assertEqual(volumes["config"]["configMap"]["name"], RELEASE)
                    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
                    self.assertRegex(annotations["checksum/config"], r"^[0-9a-f]{64}$")

    def test_both_roles_have_grpc_liveness_and_readiness_probes_on_50051(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                for role in ("api", "worker"):
                    deployment = named(objects, "Deployment", f"{RELEASE}-{role}")
                    (container,) = deployment["spec"]["template"]["spec"]["containers"]
                    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
                    self.assertEqual(ports, {"grpc": GRPC_PORT, "metrics": METRICS_PORT})
                    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                        self.assertEqual(container[probe]["grpc"], {"port": GRPC_PORT}, probe)
                        self.assertNotIn("httpGet", container[probe])

    def test_pods_get_longer_to_stop_than_the_shutdown_grace(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                grace = tomllib.loads(self.config_toml(objects))["shutdown"]["grace"]
                seconds = int(grace[:-1]) * (60 if grace.endswith("m") else 1)
                for deployment in of_kind(objects, "Deployment"):
                    spec = deployment["spec"]["template"]["spec"]
                    self.assertGreater(spec["terminationGracePeriodSeconds"], seconds, name)

    def test_the_signing_key_reaches_the_api_only(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                api = named(objects, "Deployment", f"{RELEASE}-api")
                worker = named(objects, "Deployment", f"{RELEASE}-worker")
                self.assertIn("COUNTERSIGN_SIGNING_KEY", env_of(pod_spec(api)["containers"][0]))
                self.assertNotIn(
                    "COUNTERSIGN_SIGNING_KEY", env_of(pod_spec(worker)["containers"][0])
                )

    def test_otel_export_is_configured_only_when_an_endpoint_is_given(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                for deployment in of_kind(objects, "Deployment"):
                    env = env_of(deployment["spec"]["template"]["spec"]["containers"][0])
                    if name == "defaults":
                        self.assertNotIn("OTEL_EXPORTER_OTLP_ENDPOINT", env)
                    else:
                        self.assertEqual(
                            env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"],
                            "http://otel-collector.observability.svc:4317",
                        )
                        self.assertEqual(
                            env["OTEL_SERVICE_NAME"]["value"], deployment["metadata"]["name"]
                        )

    def test_the_services_select_the_pods_and_expose_grpc_and_metrics(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                api = named(objects, "Service", f"{RELEASE}-api")
                self.assertEqual(
                    {(p["name"], p["port"], p["targetPort"]) for p in api["spec"]["ports"]},
                    {("grpc", GRPC_PORT, "grpc"), ("metrics", METRICS_PORT, "metrics")},
                )
                workers = named(objects, "Service", f"{RELEASE}-worker-metrics")
                self.assertEqual(workers["spec"]["clusterIP"], "None")
                self.assertEqual(
                    [(p["name"], p["port"]) for p in workers["spec"]["ports"]],
                    [("metrics", METRICS_PORT)],
                )
                for service, role in ((api, "api"), (workers, "worker")):
                    pod_labels = named(objects, "Deployment", f"{RELEASE}-{role}")["spec"][
                        "template"
                    ]["metadata"]["labels"]
                    self.assertLessEqual(service["spec"]["selector"].items(), pod_labels.items())
                    component = service["spec"]["selector"]["app.kubernetes.io/component"]
                    self.assertEqual(component, role)

    def config_toml(self, objects: list[dict]) -> str:
        return named(objects, "ConfigMap", RELEASE)["data"]["countersign.toml"]


class TheMigration(RenderedScenarios):
    def test_the_migration_job_is_a_pre_install_pre_upgrade_hook_running_migrate(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                job = named(objects, "Job", f"{RELEASE}-migrate")
                annotations = job["metadata"]["annotations"]
                self.assertEqual(annotations["helm.sh/hook"], "pre-install,pre-upgrade")
                self.assertEqual(int(annotations["helm.sh/hook-weight"]), -5)
                self.assertEqual(
                    annotations["helm.sh/hook-delete-policy"], "before-hook-creation,hook-succeeded"
                )
                spec = job["spec"]["template"]["spec"]
                self.assertEqual(spec["restartPolicy"], "Never")
                (container,) = spec["containers"]
                self.assertEqual(container["args"], ["migrate"])
                extra = {e["name"] for e in self.expected(name)["extraEnv"]}
                self.assertEqual(
                    set(env_of(container)),
                    {"COUNTERSIGN_MIGRATE_DATABASE_URL", "COUNTERSIGN_DATABASE_URL"} | extra,
                )

    def test_the_migration_needs_nothing_that_is_installed_after_it(self):
        """A pre-install hook runs before the release's own objects exist: the Job may
        use no ConfigMap and no ServiceAccount of the release."""
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                job = named(objects, "Job", f"{RELEASE}-migrate")
                spec = job["spec"]["template"]["spec"]
                release_objects = {
                    o["metadata"]["name"]
                    for o in objects
                    if "helm.sh/hook" not in o["metadata"].get("annotations", {})
                    and o["kind"] in ("ConfigMap", "ServiceAccount")
                }
                self.assertNotIn(spec.get("serviceAccountName"), release_objects)
                for volume in spec.get("volumes", []):
                    self.assertNotIn("configMap", volume)
                self.assertFalse(spec["automountServiceAccountToken"])


class NoSecretIsEverRendered(RenderedScenarios):
    def test_every_database_redis_and_signing_secret_comes_from_a_secret_key_ref(self):
        secrets = {
            "defaults": {
                "COUNTERSIGN_DATABASE_URL": ("countersign", "database-url"),
                "COUNTERSIGN_MIGRATE_DATABASE_URL": ("countersign", "migrate-database-url"),
                "COUNTERSIGN_REDIS_URL": ("countersign", "redis-url"),
                "COUNTERSIGN_SIGNING_KEY": ("countersign", "signing-key"),
            },
            "production": {
                "COUNTERSIGN_DATABASE_URL": ("countersign-postgres", "app-url"),
                "COUNTERSIGN_MIGRATE_DATABASE_URL": ("countersign-postgres", "owner-url"),
                "COUNTERSIGN_REDIS_URL": ("countersign-redis", "url"),
                "COUNTERSIGN_SIGNING_KEY": ("countersign-audit-signing", "seed"),
            },
        }
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                seen = set()
                for where, spec in pod_specs(objects):
                    for container in spec["containers"]:
                        for env in container.get("env", []):
                            if not SECRET_ENV.match(env["name"]):
                                continue
                            seen.add(env["name"])
                            self.assertNotIn("value", env, f"{where}: {env['name']} in plain text")
                            ref = env["valueFrom"]["secretKeyRef"]
                            self.assertEqual(
                                (ref["name"], ref["key"]), secrets[name][env["name"]], where
                            )
                self.assertEqual(seen, set(secrets[name]))

    def test_no_rendered_manifest_holds_a_secret_value(self):
        for name, texts in self.texts.items():
            with self.subTest(values=name):
                self.assertEqual(of_kind(self.rendered[name], "Secret"), [])
                for path, text in texts.items():
                    # The one legitimate 64-hex value: the ConfigMap's digest.
                    text = re.sub(r"checksum/config: [0-9a-f]{64}", "checksum/config: -", text)
                    for sentinel in SENTINELS.values():
                        self.assertNotIn(sentinel, text, path)
                    for pattern in SECRET_LOOKING:
                        self.assertIsNone(pattern.search(text), f"{path}: {pattern.pattern}")

    def test_a_secret_offered_as_a_value_is_refused_naming_the_key(self):
        attempts = [
            ({"database": {"url": SENTINELS["database_url"]}}, "url"),
            ({"database": {"password": "SENTINEL-pg-app-pw-7f3a"}}, "password"),
            ({"database": {"migrateUrl": SENTINELS["migrate_url"]}}, "migrateUrl"),
            ({"redis": {"url": SENTINELS["redis_url"]}}, "url"),
            ({"signingKey": {"value": SENTINELS["signing_key"]}}, "value"),
            ({"config": {"database": {"url": SENTINELS["database_url"]}}}, "url"),
            ({"config": {"redis": {"url": SENTINELS["redis_url"]}}}, "url"),
            ({"config": {"audit": {"signing_key": SENTINELS["signing_key"]}}}, "audit"),
        ]
        for override, key in attempts:
            with self.subTest(override=list(override)):
                with self.assertRaises(helm.HelmValuesError) as refused:
                    render_text(merge(production_values(), override))
                self.assertIn(f"'{key}' not allowed", str(refused.exception))
                for sentinel in SENTINELS.values():
                    self.assertNotIn(sentinel, str(refused.exception))


class PodsAreLockedDown(RenderedScenarios):
    def test_pods_run_as_non_root_with_a_read_only_root_filesystem(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                specs = pod_specs(objects)
                self.assertEqual(len(specs), 3)
                for where, spec in specs:
                    pod = spec["securityContext"]
                    self.assertIs(pod["runAsNonRoot"], True, where)
                    self.assertEqual(pod["runAsUser"], 65532, where)
                    self.assertEqual(pod["seccompProfile"], {"type": "RuntimeDefault"}, where)
                    self.assertIs(spec["automountServiceAccountToken"], False, where)
                    for container in spec["containers"]:
                        ctx = container["securityContext"]
                        self.assertIs(ctx["readOnlyRootFilesystem"], True, where)
                        self.assertIs(ctx["allowPrivilegeEscalation"], False, where)
                        self.assertIs(ctx["runAsNonRoot"], True, where)
                        self.assertEqual(ctx["capabilities"], {"drop": ["ALL"]}, where)
                        self.assertEqual(set(container["resources"]), {"requests", "limits"}, where)
                        for kind in ("requests", "limits"):
                            self.assertEqual(
                                set(container["resources"][kind]), {"cpu", "memory"}, where
                            )
                        mounts = {m["mountPath"] for m in container["volumeMounts"]}
                        self.assertIn("/tmp", mounts, where)

    def test_the_service_account_mounts_no_token(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                (account,) = of_kind(objects, "ServiceAccount")
                self.assertIs(account["automountServiceAccountToken"], False)
                for deployment in of_kind(objects, "Deployment"):
                    self.assertEqual(
                        deployment["spec"]["template"]["spec"]["serviceAccountName"],
                        account["metadata"]["name"],
                    )


class TheConfigFile(RenderedScenarios):
    def test_the_config_map_parses_as_toml_with_exactly_the_documented_keys(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                text = named(objects, "ConfigMap", RELEASE)["data"]["countersign.toml"]
                config = tomllib.loads(text)
                self.assertEqual(toml_keys(config), TOML_KEYS)
                values = self.expected(name)["config"]
                self.assertEqual(config["listen"], f"0.0.0.0:{GRPC_PORT}")
                self.assertEqual(config["metrics"]["listen"], f"0.0.0.0:{METRICS_PORT}")
                self.assertEqual(config["console"], {"enabled": False})
                self.assertEqual(config["log"], values["log"])
                self.assertEqual(config["shutdown"], values["shutdown"])
                self.assertEqual(config["database"], values["database"])
                self.assertEqual(config["redis"], values["redis"])
                self.assertEqual(config["review"], values["review"])

    def test_the_console_is_off_unless_enabled_then_served_by_the_api_pods_only(self):
        objects = render({"console": {"enabled": True, "sessionTtl": "2h"}})
        config = tomllib.loads(named(objects, "ConfigMap", RELEASE)["data"]["countersign.toml"])
        self.assertEqual(
            config["console"],
            {
                "enabled": True,
                "listen": "0.0.0.0:8080",
                "session_ttl": "2h",
                "secure_cookie": True,
                "trust_forwarded_proto": False,
            },
        )
        api = named(objects, "Deployment", f"{RELEASE}-api")
        worker = named(objects, "Deployment", f"{RELEASE}-worker")
        ports = lambda d: {p["name"]: p["containerPort"] for p in pod_spec(d)["containers"][0]["ports"]}
        self.assertEqual(ports(api)["console"], 8080)
        self.assertNotIn("console", ports(worker))
        service = named(objects, "Service", f"{RELEASE}-api")
        self.assertIn(("console", 8080, "console"), {(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]})
        for kind, obj in (("Deployment", api), ("Service", service)):
            kubernetes_validate.validate(obj, KUBERNETES, strict=True)

    def test_production_values_reach_the_config_file(self):
        config = tomllib.loads(
            named(self.rendered["production"], "ConfigMap", RELEASE)["data"]["countersign.toml"]
        )
        self.assertEqual(config["database"]["pool"], 32)
        self.assertEqual(config["redis"]["prefix"], "countersign-prod")
        self.assertEqual(
            config["review"],
            {
                "workers": 8,
                "express_workers": 2,
                "deadline": "90s",
                "attempts": 5,
                "lease": "45s",
            },
        )
        self.assertEqual(config["shutdown"]["grace"], "1m")

    def test_malformed_settings_are_refused_naming_the_key(self):
        attempts = [
            ({"config": {"review": {"deadline": "soon"}}}, "/config/review/deadline"),
            ({"config": {"log": {"format": "xml"}}}, "/config/log/format"),
            ({"config": {"database": {"pool": 0}}}, "/config/database/pool"),
            (
                {"config": {"review": {"express_workers": -1}}},
                "/config/review/express_workers",
            ),
            ({"config": {"reveiw": {"workers": 2}}}, "'reveiw' not allowed"),
            ({"config": {"shutdown": {"grace": "1h"}}}, "/config/shutdown/grace"),
        ]
        for override, named_key in attempts:
            with self.subTest(override=override):
                with self.assertRaises(helm.HelmValuesError) as refused:
                    render_text(override)
                self.assertIn(named_key, str(refused.exception))

    def test_a_termination_grace_not_above_the_shutdown_grace_is_refused(self):
        with self.assertRaises(helm.HelmRenderError) as refused:
            render_text({"terminationGracePeriodSeconds": 30})
        self.assertIn("terminationGracePeriodSeconds (30) must exceed", str(refused.exception))


class ScalingAndDisruption(RenderedScenarios):
    def test_autoscalers_exist_only_when_enabled(self):
        self.assertEqual(of_kind(self.rendered["defaults"], "HorizontalPodAutoscaler"), [])
        for deployment in of_kind(self.rendered["defaults"], "Deployment"):
            self.assertEqual(deployment["spec"]["replicas"], 2)
        production = self.rendered["production"]
        expected = {"api": (3, 12, 65), "worker": (4, 20, 70)}
        for role, (low, high, cpu) in expected.items():
            hpa = named(production, "HorizontalPodAutoscaler", f"{RELEASE}-{role}")
            self.assertEqual(hpa["apiVersion"], "autoscaling/v2")
            self.assertEqual(
                hpa["spec"]["scaleTargetRef"],
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{RELEASE}-{role}"},
            )
            self.assertEqual((hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]), (low, high))
            (metric,) = hpa["spec"]["metrics"]
            self.assertEqual(metric["resource"]["name"], "cpu")
            self.assertEqual(metric["resource"]["target"]["averageUtilization"], cpu)
            # The HPA owns the replica count: the Deployment must not fight it.
            deployment = named(production, "Deployment", f"{RELEASE}-{role}")
            self.assertNotIn("replicas", deployment["spec"])
        only_api = render({"api": {"autoscaling": {"enabled": True}}})
        self.assertEqual(
            [h["metadata"]["name"] for h in of_kind(only_api, "HorizontalPodAutoscaler")],
            [f"{RELEASE}-api"],
        )

    def test_disruption_budgets_exist_only_when_enabled(self):
        for name, objects in self.rendered.items():
            with self.subTest(values=name):
                for role in ("api", "worker"):
                    pdb = named(objects, "PodDisruptionBudget", f"{RELEASE}-{role}")
                    pod_labels = named(objects, "Deployment", f"{RELEASE}-{role}")["spec"][
                        "template"
                    ]["metadata"]["labels"]
                    self.assertLessEqual(
                        pdb["spec"]["selector"]["matchLabels"].items(), pod_labels.items()
                    )
        self.assertEqual(
            named(self.rendered["production"], "PodDisruptionBudget", f"{RELEASE}-worker")[
                "spec"
            ]["maxUnavailable"],
            "25%",
        )
        disabled = render(
            {
                "api": {"podDisruptionBudget": {"enabled": False}},
                "worker": {"podDisruptionBudget": {"enabled": False}},
            }
        )
        self.assertEqual(of_kind(disabled, "PodDisruptionBudget"), [])

    def test_the_service_monitor_is_off_by_default(self):
        self.assertEqual(of_kind(self.rendered["defaults"], "ServiceMonitor"), [])
        self.assertEqual(len(of_kind(self.rendered["production"], "ServiceMonitor")), 1)


if __name__ == "__main__":
    program = unittest.main(exit=False, verbosity=2)
    result = program.result
    # A test with failing subtests is listed once per subtest: count tests, not entries.
    failed = len({getattr(t, "test_case", t).id() for t, _ in result.failures + result.errors})
    failed += len(result.unexpectedSuccesses)
    print(f"helm: {result.testsRun - failed} passed, {failed} failed")
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
