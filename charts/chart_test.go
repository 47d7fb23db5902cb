// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package charts_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/cilium/pkg/annotation"
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	ciliumv2alpha1 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2alpha1"
	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	kubeletapis "k8s.io/kubelet/pkg/apis"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extensionscmdcontroller "github.com/gardener/gardener/extensions/pkg/controller/cmd"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	kubeapiserverconstants "github.com/gardener/gardener/pkg/component/kubernetes/apiserver/constants"

	"github.com/gardener/gardener-extension-cilium-selfhosted/charts"
	"github.com/gardener/gardener-extension-cilium-selfhosted/cmd/gardener-extension-cilium-selfhosted/app"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/controller/managedresourceretry"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/identity"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/helm"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/testenv"
	"github.com/gardener/gardener-extension-cilium-selfhosted/webhook/apiserveraccess"
)

const namespace = "extension-cilium-selfhosted"

// selfHostedValues are the values gardenlet gives the chart on the self-hosted shoot.
func selfHostedValues(t *testing.T, shoot *gardencorev1beta1.Shoot) map[string]any {
	t.Helper()
	values, err := testenv.ChartValues(shoot)
	if err != nil {
		t.Fatal(err)
	}
	return values
}

func render(t *testing.T, values map[string]any) []client.Object {
	t.Helper()
	chart, err := helm.LoadFS(charts.FS, charts.ChartPath)
	if err != nil {
		t.Fatal(err)
	}
	objs, unknown, err := helm.Render(chart, "cilium-selfhosted", namespace, values, scheme.New())
	if err != nil {
		t.Fatal(err)
	}
	if len(unknown) > 0 {
		t.Errorf("manifests of unknown kinds: %v", unknown)
	}
	return objs
}

// policy is the chart's admission policy whose name ends in suffix, on a self-hosted shoot.
func policy(t *testing.T, suffix string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	return policyIn(t, selfHostedValues(t, fixtures.Shoot(true)), suffix)
}

// policyIn is the chart's admission policy whose name ends in suffix, rendered with values.
func policyIn(t *testing.T, values map[string]any, suffix string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	for _, p := range find[*admissionregistrationv1.ValidatingAdmissionPolicy](render(t, values)) {
		if strings.HasSuffix(p.Name, suffix) {
			return p
		}
	}
	t.Fatalf("the chart has no policy %s", suffix)
	return nil
}

// validations are the expressions of p's validations, one a line.
func validations(p *admissionregistrationv1.ValidatingAdmissionPolicy) string {
	var text strings.Builder
	for _, v := range p.Spec.Validations {
		text.WriteString(v.Expression + "\n")
	}
	return text.String()
}

func find[T client.Object](objs []client.Object) []T {
	var out []T
	for _, obj := range objs {
		if o, ok := obj.(T); ok {
			out = append(out, o)
		}
	}
	return out
}

func args(d *appsv1.DaemonSet) []string { return d.Spec.Template.Spec.Containers[0].Args }

// TestNothingOutsideSelfHostedShoots: a gardenlet of a regular seed installs the chart for every Cilium shoot (the
// registration names Network/cilium); there the extension has nothing to do, and the chart renders nothing.
func TestNothingOutsideSelfHostedShoots(t *testing.T) {
	if objs := render(t, nil); len(objs) != 0 {
		t.Errorf("%d objects outside a self-hosted shoot, want none", len(objs))
	}
}

func TestSelfHostedValues(t *testing.T) {
	values := selfHostedValues(t, fixtures.Shoot(true))
	values["usablePorts"] = []any{30001, 30002, 30003, 30004, 30005}
	objs := render(t, values)
	d := find[*appsv1.DaemonSet](objs)[0]
	spec := d.Spec.Template.Spec
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet || spec.NodeSelector["node-role.kubernetes.io/control-plane"] != "" || len(spec.NodeSelector) != 1 {
		t.Errorf("hostNetwork %v dnsPolicy %s nodeSelector %v, want a pod on each control-plane node in the host network", spec.HostNetwork, spec.DNSPolicy, spec.NodeSelector)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == "node-role.kubernetes.io/control-plane" }) {
		t.Errorf("tolerations %v lack the control-plane taint", spec.Tolerations)
	}
	for _, want := range []string{"--self-hosted-shoot-cluster=true", "--webhook-config-namespace=" + namespace, "--webhook-config-mode=url",
		// On loopback, at the chart's port whatever usablePorts gardenadm hands out.
		"--webhook-config-url=127.0.0.1:19443", "--webhook-config-server-host=127.0.0.1", "--webhook-config-server-port=19443",
		"--metrics-bind-address=[$(POD_IP)]:30001", "--health-bind-address=[$(POD_IP)]:30002",
		// The chart's probe settings are the binary's defaults.
		"--endpoint-probe-interval=" + health.DefaultSettings.Interval.String(), "--endpoint-probe-timeout=" + health.DefaultSettings.Timeout.String(),
		"--endpoint-probe-failure-threshold=" + strconv.Itoa(health.DefaultSettings.FailureThreshold),
		"--endpoint-probe-success-threshold=" + strconv.Itoa(health.DefaultSettings.SuccessThreshold)} {
		if !slices.Contains(args(d), want) {
			t.Errorf("args %v lack %s", args(d), want)
		}
	}
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the extension must run as non-root")
	}
	if services := find[*corev1.Service](objs); len(services) != 0 {
		t.Errorf("Services %+v, want none: kube-apiserver calls the webhook on its node's loopback", services)
	}
	// kube-apiserver of its own node, not the `kubernetes` ClusterIP that Cilium serves; the bind address is the pod's.
	env := map[string]string{}
	for _, e := range spec.Containers[0].Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["KUBERNETES_SERVICE_HOST"] != "localhost" || env["KUBERNETES_SERVICE_PORT"] != "443" || env["POD_IP"] != "status.podIP" ||
		env[cilium.EnvHTTP2ReadIdleTimeout] != "4" || env[cilium.EnvHTTP2PingTimeout] != "4" {
		t.Errorf("env %v, want KUBERNETES_SERVICE_HOST=localhost, KUBERNETES_SERVICE_PORT=443, POD_IP from status.podIP and client-go's HTTP/2 health check after 4+4 s", env)
	}
	// One node at a time, the old pod before the new one (host ports); no PodDisruptionBudget, as nothing evicts a
	// DaemonSet's pods.
	if st := d.Spec.UpdateStrategy; st.Type != appsv1.RollingUpdateDaemonSetStrategyType || st.RollingUpdate == nil ||
		st.RollingUpdate.MaxUnavailable.IntValue() != 1 || st.RollingUpdate.MaxSurge.IntValue() != 0 {
		t.Errorf("update strategy %+v, want RollingUpdate with maxUnavailable 1 and maxSurge 0", st)
	}
	if pdbs := find[*policyv1.PodDisruptionBudget](objs); len(pdbs) != 0 {
		t.Errorf("PodDisruptionBudgets %+v, want none", pdbs)
	}
}

// TestLeastPrivilege fails when the rules gain a wildcard, cluster-wide access to Secrets, or write access beyond
// what the extension needs.
func TestLeastPrivilege(t *testing.T) {
	objs := render(t, selfHostedValues(t, fixtures.Shoot(true)))
	var rules []rbacv1.PolicyRule
	for _, cr := range find[*rbacv1.ClusterRole](objs) {
		// The role for the metrics' scraper, which the extension is not bound to.
		if cr.Name == "gardener-extension-cilium-selfhosted-metrics-reader" {
			if len(cr.Rules) != 1 || !slices.Equal(cr.Rules[0].NonResourceURLs, []string{"/metrics"}) || !slices.Equal(cr.Rules[0].Verbs, []string{"get"}) {
				t.Errorf("metrics reader %+v", cr.Rules)
			}
			continue
		}
		for _, r := range cr.Rules {
			if slices.Contains(r.Resources, "secrets") {
				t.Errorf("ClusterRole %s grants Secrets cluster-wide: %+v", cr.Name, r)
			}
		}
		rules = append(rules, cr.Rules...)
	}
	roles := find[*rbacv1.Role](objs)
	if len(roles) != 2 {
		t.Errorf("%d Roles, want one in kube-system and one in the release namespace", len(roles))
	}
	for _, role := range roles {
		if role.Namespace != "kube-system" && role.Namespace != namespace {
			t.Errorf("Role in namespace %s", role.Namespace)
		}
		rules = append(rules, role.Rules...)
	}
	for _, r := range rules {
		for _, field := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames} {
			for _, v := range field {
				if strings.Contains(v, "*") {
					t.Errorf("wildcard in %+v", r)
				}
			}
		}
		if slices.Contains(r.Resources, "mutatingwebhookconfigurations") &&
			(!slices.Equal(r.ResourceNames, []string{"gardener-extension-cilium-selfhosted"}) || slices.Contains(r.Verbs, "create")) {
			t.Errorf("access to other MutatingWebhookConfigurations (or create, which RBAC cannot limit by name): %+v", r)
		}
		if len(r.NonResourceURLs) > 0 {
			t.Errorf("non-resource URLs: %+v", r)
		}
	}
	for _, b := range find[*rbacv1.ClusterRoleBinding](objs) {
		if len(b.Subjects) != 1 || b.Subjects[0].Name != "gardener-extension-cilium-selfhosted" || b.Subjects[0].Namespace != namespace {
			t.Errorf("binding %s subjects %+v", b.Name, b.Subjects)
		}
	}
}

// TestAdmissionPoliciesKeepCiliumPinned: on a self-hosted shoot the chart ships the policies that refuse updates
// unpinning Cilium while the webhook is unreachable, with the names the extension uses, for UPDATE only (a CREATE at
// bootstrap must pass), denying, with the message by which the extension recognises their refusals; elsewhere none.
func TestAdmissionPoliciesKeepCiliumPinned(t *testing.T) {
	if policies := find[*admissionregistrationv1.ValidatingAdmissionPolicy](render(t, nil)); len(policies) != 0 {
		t.Errorf("%d admission policies outside a self-hosted shoot", len(policies))
	}
	objs := render(t, selfHostedValues(t, fixtures.Shoot(true)))
	policies := find[*admissionregistrationv1.ValidatingAdmissionPolicy](objs)
	bindings := find[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](objs)
	if len(policies) != 14 || len(bindings) != 14 {
		t.Fatalf("%d policies, %d bindings, want 14 each (two keep Cilium pinned, one fixes the endpoints ConfigMap, eight confine the extension's writes, two guard Nodes, one Cilium's leases)", len(policies), len(bindings))
	}
	var text strings.Builder
	for i, p := range policies {
		if b := bindings[i]; b.Spec.PolicyName != p.Name || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
			t.Errorf("binding %s: %+v", b.Name, b.Spec)
		}
		if !strings.Contains(p.Name, "-keep-") {
			continue
		}
		for _, r := range p.Spec.MatchConstraints.ResourceRules {
			if !slices.Equal(r.Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}) {
				t.Errorf("policy %s matches %v, want UPDATE only", p.Name, r.Operations)
			}
		}
		for _, v := range p.Spec.Validations {
			if !strings.Contains(v.MessageExpression, managedresourceretry.RefusalMarker) {
				t.Errorf("policy %s's message %s does not contain %q, by which the extension recognises its refusals", p.Name, v.MessageExpression, managedresourceretry.RefusalMarker)
			}
		}
		for _, v := range p.Spec.Variables {
			text.WriteString(v.Expression + "\n")
		}
		for _, c := range p.Spec.MatchConditions {
			text.WriteString(c.Expression + "\n")
		}
	}
	for _, name := range append([]string{"'" + apiserverendpoints.VolumeName + "'", "'" + cilium.ConfigMapName + "'"}, cilium.APIServerFlags...) {
		if !strings.Contains(text.String(), name) {
			t.Errorf("the policies do not name %s:\n%s", name, text.String())
		}
	}
}

// TestWebhookConfigurationPolicyNamesTheWebhooks: the policy that confines the extension's webhook configuration
// allows the webhooks the extension registers, under the names Gardener's webhook framework gives them.
func TestWebhookConfigurationPolicyNamesTheWebhooks(t *testing.T) {
	policy := policy(t, "-confine-webhook-configuration")
	var text strings.Builder
	for _, v := range policy.Spec.Variables {
		text.WriteString(v.Expression + "\n")
	}
	// Gardener's extensions/pkg/webhook/registration.go names a webhook <name>.<extension>.extensions.gardener.cloud.
	for _, name := range append(slices.Clone(apiserveraccess.WebhookNames), ".cilium-selfhosted.extensions.gardener.cloud") {
		if !strings.Contains(text.String(), "'"+name+"'") {
			t.Errorf("the policy does not name %s:\n%s", name, text.String())
		}
	}
	// The object selectors and the timeout the extension registers (webhook/apiserveraccess add.go).
	for _, want := range []string{
		fmt.Sprintf("{'%s': '%s', '%s': '%s'}", apiserveraccess.AgentWebhookName, cilium.LabelKeyApp, apiserveraccess.OperatorWebhookName, cilium.LabelKeyOperator),
		fmt.Sprintf("{'%s': ['%s', '%s'], '%s': ['%s']}", apiserveraccess.AgentWebhookName, cilium.LabelValueAgent, cilium.LabelValueEnvoy, apiserveraccess.OperatorWebhookName, cilium.LabelValueOperator),
		fmt.Sprintf("w.?timeoutSeconds.orValue(10) == %d ", apiserveraccess.TimeoutSeconds),
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the policy does not hold %s:\n%s", want, text.String())
		}
	}
	// The match conditions the extension writes (webhook/apiserveraccess MatchConditions), each webhook's one.
	for name, conditions := range apiserveraccess.MatchConditions {
		if len(conditions) != 1 {
			t.Fatalf("%s has %d match conditions; the policy pins one", name, len(conditions))
		}
		want := fmt.Sprintf("'%s': {'name': '%s', 'expression': %q}", name, conditions[0].Name, conditions[0].Expression)
		if !strings.Contains(text.String(), want) {
			t.Errorf("the policy does not hold %s:\n%s", want, text.String())
		}
	}
}

// TestExposuresWrittenOnlyInKubeSystem: a self-hosted shoot's SelfHostedShootExposure lives in kube-system; the
// extension may read exposures everywhere but write them (finalizer, annotation, status) only there.
func TestExposuresWrittenOnlyInKubeSystem(t *testing.T) {
	objs := render(t, selfHostedValues(t, fixtures.Shoot(true)))
	for _, cr := range find[*rbacv1.ClusterRole](objs) {
		for _, rule := range cr.Rules {
			if slices.ContainsFunc(rule.Resources, func(r string) bool { return strings.HasPrefix(r, "selfhostedshootexposures") }) &&
				slices.ContainsFunc(rule.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" }) {
				t.Errorf("ClusterRole %s grants %v on %v, want reading only", cr.Name, rule.Verbs, rule.Resources)
			}
		}
	}
	var writes []string
	for _, r := range find[*rbacv1.Role](objs) {
		for _, rule := range r.Rules {
			for _, res := range rule.Resources {
				if strings.HasPrefix(res, "selfhostedshootexposures") && slices.Contains(rule.Verbs, "patch") && r.Namespace == "kube-system" {
					writes = append(writes, res)
				}
			}
		}
	}
	slices.Sort(writes)
	if !slices.Equal(writes, []string{"selfhostedshootexposures", "selfhostedshootexposures/status"}) {
		t.Errorf("kube-system's Role lets the extension patch %v, want the exposures and their status", writes)
	}
}

// TestRBACNamesCiliumManagedResource: the one ManagedResource the extension may patch (to request its reconcile) is
// networking-cilium's, by name, in kube-system's Role; no rule grants more on ManagedResources than reading.
func TestRBACNamesCiliumManagedResource(t *testing.T) {
	objs := render(t, selfHostedValues(t, fixtures.Shoot(true)))
	var patch []rbacv1.PolicyRule
	for _, r := range find[*rbacv1.Role](objs) {
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "managedresources") {
				if r.Namespace != cilium.ManagedResource.Namespace || !slices.Equal(rule.Verbs, []string{"patch"}) {
					t.Errorf("Role %s/%s grants %v on managedresources, want only patch in %s", r.Namespace, r.Name, rule.Verbs, cilium.ManagedResource.Namespace)
				}
				patch = append(patch, rule)
			}
		}
	}
	if len(patch) != 1 || !slices.Equal(patch[0].ResourceNames, []string{cilium.ManagedResource.Name}) {
		t.Errorf("rules on managedresources in Roles: %+v, want patch on %s only", patch, cilium.ManagedResource.Name)
	}
	for _, cr := range find[*rbacv1.ClusterRole](objs) {
		for _, rule := range cr.Rules {
			if slices.Contains(rule.Resources, "managedresources") && !slices.Equal(rule.Verbs, []string{"get", "list", "watch"}) {
				t.Errorf("ClusterRole %s grants %v on managedresources, want reading only", cr.Name, rule.Verbs)
			}
		}
	}
}

// TestRBACCoversOwnedKinds: the extension may do to every kind an exposure owns what the actuator and its informers
// do (apply, list and watch, delete): namespaced kinds in kube-system's Role, the others in the ClusterRole.
func TestRBACCoversOwnedKinds(t *testing.T) {
	objs := render(t, selfHostedValues(t, fixtures.Shoot(true)))
	var clusterRules, kubeSystemRules []rbacv1.PolicyRule
	for _, cr := range find[*rbacv1.ClusterRole](objs) {
		clusterRules = append(clusterRules, cr.Rules...)
	}
	for _, r := range find[*rbacv1.Role](objs) {
		if r.Namespace == "kube-system" {
			kubeSystemRules = append(kubeSystemRules, r.Rules...)
		}
	}
	for _, kind := range resources.OwnedKinds {
		plural, _ := meta.UnsafeGuessKindToResource(kind.GroupVersionKind)
		rules := clusterRules
		if kind.Namespaced {
			rules = kubeSystemRules
		}
		for _, verb := range []string{"get", "list", "watch", "create", "patch", "delete"} {
			if !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
				return slices.Contains(r.APIGroups, kind.Group) && slices.Contains(r.Resources, plural.Resource) &&
					slices.Contains(r.Verbs, verb) && len(r.ResourceNames) == 0
			}) {
				t.Errorf("%s: no rule grants %s on %s (namespaced %v)", kind.Kind, verb, plural.GroupResource(), kind.Namespaced)
			}
		}
	}
}

// TestPodPolicyNamesCiliumPods: the policy that confines the extension's pod deletions names Cilium's pods by the
// labels the extension knows them by (pkg/cilium).
func TestPodPolicyNamesCiliumPods(t *testing.T) {
	p := policy(t, "-confine-pod-writes")
	expression := p.Spec.Validations[0].Expression
	for _, want := range []string{cilium.LabelKeyApp, cilium.LabelValueAgent, cilium.LabelValueEnvoy, cilium.LabelKeyOperator, cilium.LabelValueOperator} {
		if !strings.Contains(expression, "'"+want+"'") {
			t.Errorf("policy %s does not name %q: %s", p.Name, want, expression)
		}
	}
}

// TestEndpointsConfigMapPolicyHoldsTheKubeconfigText: the policy that fixes the endpoints ConfigMap's shape carries,
// as CEL constants, exactly the text around the first URL that the extension renders, and its keys and path; were
// they to drift apart, the policy would refuse the extension's own ConfigMap (or pass another one).
func TestEndpointsConfigMapPolicyHoldsTheKubeconfigText(t *testing.T) {
	policy := policy(t, "-endpoints-configmap-shape")
	if got := policy.Spec.MatchConditions; len(got) != 1 || got[0].Expression != "object.metadata.name == '"+apiserverendpoints.ConfigMapName+"'" {
		t.Errorf("the policy matches %+v, want the endpoints ConfigMap by name", got)
	}
	env, err := cel.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	constant := func(name string) string {
		for _, v := range policy.Spec.Variables {
			if v.Name != name {
				continue
			}
			ast, issues := env.Compile(v.Expression)
			if issues.Err() != nil {
				t.Fatalf("variable %s: %v", name, issues.Err())
			}
			prg, err := env.Program(ast)
			if err != nil {
				t.Fatal(err)
			}
			out, _, err := prg.Eval(map[string]any{})
			if err != nil {
				t.Fatalf("variable %s: %v", name, err)
			}
			s, ok := out.Value().(string)
			if !ok {
				t.Fatalf("variable %s is %T, not a string", name, out.Value())
			}
			return s
		}
		t.Fatalf("the policy has no variable %s", name)
		return ""
	}
	for name, want := range map[string]string{
		"kubeconfigPrefix": apiserverendpoints.KubeconfigPrefix,
		"kubeconfigSuffix": apiserverendpoints.KubeconfigSuffix,
		"kubeconfigPath":   apiserverendpoints.KubeconfigPath,
		"urlsKey":          apiserverendpoints.KeyAPIServerURLs,
		"pathKey":          apiserverendpoints.KeyKubeconfigPath,
		"kubeconfigKey":    apiserverendpoints.KeyKubeconfig,
	} {
		if got := constant(name); got != want {
			t.Errorf("the policy's %s is\n%q\nthe extension's\n%q", name, got, want)
		}
	}
}

// TestWritesPolicyConfinesOwnedKinds: the policy that confines the extension's writes by content matches every kind an
// exposure owns, and names the labels, selector keys, classes, annotation and names by which the extension builds them
// (pkg/exposure/resources), so that its own objects pass and nothing else does.
func TestWritesPolicyConfinesOwnedKinds(t *testing.T) {
	policy := policy(t, "-confine-writes")
	for _, kind := range resources.OwnedKinds {
		plural, _ := meta.UnsafeGuessKindToResource(kind.GroupVersionKind)
		if !slices.ContainsFunc(policy.Spec.MatchConstraints.ResourceRules, func(r admissionregistrationv1.NamedRuleWithOperations) bool {
			return slices.Contains(r.APIGroups, kind.Group) && slices.Contains(r.Resources, plural.Resource) && len(r.Operations) == 3
		}) {
			t.Errorf("the policy does not confine CREATE, UPDATE and DELETE of %s", plural.GroupResource())
		}
	}
	var text strings.Builder
	for _, v := range policy.Spec.Variables {
		text.WriteString(v.Expression + "\n")
	}
	for _, v := range policy.Spec.Validations {
		text.WriteString(v.Expression + "\n")
	}
	const stem = "'cilium-exposure-'"
	if resources.ServiceName("x") != "cilium-exposure-x" || resources.ClusterScopedName("kube-system", "x") != "cilium-exposure-kube-system-x" {
		t.Errorf("the extension names an exposure's objects %s and %s, the policy after %s", resources.ServiceName("x"), resources.ClusterScopedName("kube-system", "x"), stem)
	}
	for _, name := range []string{
		stem, identity.LabelManagedBy, identity.Name, resources.LabelExposureName, resources.LabelExposureNamespace,
		resources.SelectorKeyServiceNamespace, resources.SelectorKeyServiceName, discoveryv1.LabelServiceName,
		ciliumv2alpha1.L2AnnounceLoadBalancerClass, ciliumv2.BGPLoadBalancerClass, annotation.LBIPAMIPsKey,
		string(ciliumv2.BGPServiceAdvert), string(ciliumv2.BGPLoadBalancerIPAddr), apiserverendpoints.ConfigMapName,
	} {
		if !strings.Contains(text.String(), "'"+strings.Trim(name, "'")+"'") {
			t.Errorf("the policy does not name %s:\n%s", name, text.String())
		}
	}
}

// TestProberAccountIsBoundToNothing: the probes' ServiceAccount mounts no token and no binding names it, so that its
// tokens open only what every authenticated user may read (/readyz); the extension may request its tokens, by name,
// and the DaemonSet tells the extension to probe with them.
func TestProberAccountIsBoundToNothing(t *testing.T) {
	objs := render(t, selfHostedValues(t, fixtures.Shoot(true)))
	const prober = "gardener-extension-cilium-selfhosted-prober"
	var account *corev1.ServiceAccount
	for _, sa := range find[*corev1.ServiceAccount](objs) {
		if sa.Name == prober {
			account = sa
		}
	}
	if account == nil || account.Namespace != namespace || account.AutomountServiceAccountToken == nil || *account.AutomountServiceAccountToken {
		t.Fatalf("the probes' ServiceAccount: %+v, want one in %s that mounts no token", account, namespace)
	}
	var subjects []rbacv1.Subject
	for _, b := range find[*rbacv1.RoleBinding](objs) {
		subjects = append(subjects, b.Subjects...)
	}
	for _, b := range find[*rbacv1.ClusterRoleBinding](objs) {
		subjects = append(subjects, b.Subjects...)
	}
	if slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool { return s.Name == prober }) {
		t.Errorf("a binding names the probes' ServiceAccount: %+v", subjects)
	}
	var grants []rbacv1.PolicyRule
	for _, r := range find[*rbacv1.Role](objs) {
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "serviceaccounts/token") {
				grants = append(grants, rule)
			}
		}
	}
	if len(grants) != 1 || !slices.Equal(grants[0].ResourceNames, []string{prober}) || !slices.Equal(grants[0].Verbs, []string{"create"}) {
		t.Errorf("token rules %+v, want create on %s alone", grants, prober)
	}
	if d := find[*appsv1.DaemonSet](objs)[0]; !slices.Contains(args(d), "--endpoint-probe-service-account="+namespace+"/"+prober) {
		t.Errorf("args %v do not name the probes' ServiceAccount", args(d))
	}
}

// TestImagePinned: the chart runs the image of the version it was released with, never a moving tag.
func TestImagePinned(t *testing.T) {
	chart, err := helm.LoadFS(charts.FS, charts.ChartPath)
	if err != nil {
		t.Fatal(err)
	}
	d := find[*appsv1.DaemonSet](render(t, selfHostedValues(t, fixtures.Shoot(true))))[0]
	image := d.Spec.Template.Spec.Containers[0].Image
	if !strings.HasSuffix(image, ":v"+chart.Metadata.AppVersion) {
		t.Errorf("image %s, want the chart's appVersion v%s", image, chart.Metadata.AppVersion)
	}
	values := selfHostedValues(t, fixtures.Shoot(true))
	values["image"].(map[string]any)["digest"] = "sha256:0123"
	d = find[*appsv1.DaemonSet](render(t, values))[0]
	if image := d.Spec.Template.Spec.Containers[0].Image; image != testenv.ImageRepository+":v"+chart.Metadata.AppVersion+"@sha256:0123" {
		t.Errorf("image %s with a digest", image)
	}
}

// TestNoImageNamedWithoutARepository: the chart in git names no image that does not exist; rendered without the
// repository an operator pushed the image to, it stops with a message naming the value.
func TestNoImageNamedWithoutARepository(t *testing.T) {
	chart, err := helm.LoadFS(charts.FS, charts.ChartPath)
	if err != nil {
		t.Fatal(err)
	}
	values := selfHostedValues(t, fixtures.Shoot(true))
	delete(values, "image")
	_, _, err = helm.Render(chart, "cilium-selfhosted", namespace, values, scheme.New())
	if err == nil || !strings.Contains(err.Error(), "image.repository is not set") {
		t.Errorf("rendered without image.repository: %v, want an error naming image.repository", err)
	}
}

// TestMemoryLimited: the extension's container has a memory limit, so that a flood of its webhook from the node
// network, or a leak, ends in its own restart rather than in the control-plane node's memory.
func TestMemoryLimited(t *testing.T) {
	d := find[*appsv1.DaemonSet](render(t, selfHostedValues(t, fixtures.Shoot(true))))[0]
	resources := d.Spec.Template.Spec.Containers[0].Resources
	limit, request := resources.Limits.Memory(), resources.Requests.Memory()
	if limit.IsZero() || request.IsZero() || limit.Cmp(*request) < 0 {
		t.Errorf("memory request %s, limit %s: want both, the limit above the request", request, limit)
	}
}

// TestLeaseNamed: the extension may read and renew only its own leader election lease, under the name it campaigns
// for.
func TestLeaseNamed(t *testing.T) {
	var named []string
	for _, r := range find[*rbacv1.Role](render(t, selfHostedValues(t, fixtures.Shoot(true)))) {
		for _, rule := range r.Rules {
			if !slices.Contains(rule.Resources, "leases") || r.Namespace != namespace {
				continue
			}
			if slices.Contains(rule.Verbs, "get") || slices.Contains(rule.Verbs, "update") {
				named = append(named, rule.ResourceNames...)
				if len(rule.ResourceNames) == 0 {
					t.Errorf("Role %s reads or renews every lease of its namespace: %+v", r.Name, rule)
				}
			}
		}
	}
	if want := extensionscmdcontroller.LeaderElectionNameID(app.ExtensionName); !slices.Equal(named, []string{want}) {
		t.Errorf("leases named %v, want %s", named, want)
	}
}

// TestLeasePolicyNamesTheExposuresLeases: the extension may write only the L2 announcement leases of the exposures'
// Services, by the names Cilium gives them.
func TestLeasePolicyNamesTheExposuresLeases(t *testing.T) {
	prefix := cilium.L2AnnouncementLeaseName(cilium.Namespace, resources.ServiceName(""))
	if text := validations(policy(t, "-confine-lease-writes")); !strings.Contains(text, "request.name.startsWith('"+prefix+"')") {
		t.Errorf("the lease policy does not confine the extension to the leases named %s*:\n%s", prefix, text)
	}
}

// TestPortsPinnedToKubeAPIServers: an exposure's Service and EndpointSlices carry kube-apiserver's port, the one
// Gardener writes into the exposure's spec.port, and nothing else.
func TestPortsPinnedToKubeAPIServers(t *testing.T) {
	text := validations(policy(t, "-confine-writes"))
	port := strconv.Itoa(kubeapiserverconstants.Port)
	for _, want := range []string{"object.spec.ports[0].port == " + port + " ", "object.ports[0].?port.orValue(0) == " + port + " "} {
		if !strings.Contains(text, want) {
			t.Errorf("the writes policy does not hold %q:\n%s", want, text)
		}
	}
}

// TestBoundsFromTheShootOrTheOperator: the writes policy bounds pools, EndpointSlices, BGP peers and their password
// Secrets by what the Shoot declares, nothing where it declares nothing, and by the chart values in its place where the
// operator sets them.
func TestBoundsFromTheShootOrTheOperator(t *testing.T) {
	declaredBGP := `{"apiVersion":"cilium-selfhosted.extensions.gardener.cloud/v1alpha1","kind":"ExposureConfig","announcement":"BGP",` +
		`"pool":{"cidrs":["203.0.113.0/28"],"ranges":[{"start":"198.51.100.10","stop":"198.51.100.12"}]},` +
		`"bgp":{"localASN":64512,"peers":[{"name":"tor","address":"10.0.0.1","asn":4200000000,"authSecretRef":"tor-password"}]}}`
	for name, tc := range map[string]struct {
		shoot  *gardencorev1beta1.Shoot
		values map[string]any
		want   map[string]string
	}{
		"declared by the Shoot": {
			shoot: fixtures.WithExposureConfig(fixtures.Shoot(true), declaredBGP),
			want: map[string]string{
				"poolBounds":       `[{"cidr":"203.0.113.0/28"},{"start":"198.51.100.10","stop":"198.51.100.12"}]`,
				"endpointBounds":   `["` + fixtures.NodeNetwork + `"]`,
				"peerBounds":       `[{"address":"10.0.0.1","asn":"4200000000"}]`,
				"authSecretBounds": `["tor-password"]`,
			},
		},
		"nothing declared": {
			shoot: fixtures.Shoot(true),
			want:  map[string]string{"poolBounds": `[]`, "peerBounds": `[]`, "authSecretBounds": `[]`, "endpointBounds": `["` + fixtures.NodeNetwork + `"]`},
		},
		"set by the operator": {
			shoot:  fixtures.WithExposureConfig(fixtures.Shoot(true), declaredBGP),
			values: map[string]any{"exposurePoolCIDRs": []any{"192.0.2.0/24"}, "exposureEndpointCIDRs": []any{"10.1.0.0/16"}, "exposurePeerCIDRs": []any{"10.2.0.0/24"}},
			want: map[string]string{
				"poolBounds":       `[{"cidr":"192.0.2.0/24"}]`,
				"endpointBounds":   `["10.1.0.0/16"]`,
				"peerBounds":       `[{"cidr":"10.2.0.0/24"}]`,
				"authSecretBounds": `["tor-password"]`,
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			values := selfHostedValues(t, tc.shoot)
			maps.Copy(values, tc.values)
			got := map[string]string{}
			for _, v := range policyIn(t, values, "-confine-writes").Spec.Variables {
				if _, ok := tc.want[v.Name]; ok {
					got[v.Name] = v.Expression
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("bounds %v, want %v", got, tc.want)
			}
		})
	}
}

// TestKubeletLabelsAsNodeRestriction: the writes policy's list of the labels a kubelet may set on its own Node is
// NodeRestriction's (k8s.io/kubelet pkg/apis), which the providerConfig's validation uses through Gardener.
func TestKubeletLabelsAsNodeRestriction(t *testing.T) {
	text := validations(policy(t, "-confine-writes"))
	for _, list := range [][]string{kubeletapis.KubeletLabels(), kubeletapis.KubeletLabelNamespaces()} {
		quoted := make([]string, len(list))
		for i, l := range list {
			quoted[i] = `"` + l + `"`
		}
		if want := "[" + strings.Join(quoted, ", ") + "]"; !strings.Contains(text, want) {
			t.Errorf("the writes policy does not hold %s", want)
		}
	}
}

// TestL2PoolsInTheNodeNetworkByDefault: where the Shoot declares an L2 exposure (or nothing, L2 being the default), the
// writes policy also keeps the pools in the Shoot's node network; not where it declares BGP, nor where the operator
// bounds the pools by exposurePoolCIDRs.
func TestL2PoolsInTheNodeNetworkByDefault(t *testing.T) {
	bgp := `{"apiVersion":"cilium-selfhosted.extensions.gardener.cloud/v1alpha1","kind":"ExposureConfig","announcement":"BGP","pool":{"cidrs":["203.0.113.0/28"]}}`
	for name, tc := range map[string]struct {
		shoot  *gardencorev1beta1.Shoot
		values map[string]any
		want   bool
	}{
		"L2 declared":       {fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2), nil, true},
		"nothing declared":  {fixtures.Shoot(true), nil, true},
		"BGP declared":      {fixtures.WithExposureConfig(fixtures.Shoot(true), bgp), nil, false},
		"operator's ranges": {fixtures.WithExposureConfig(fixtures.Shoot(true), fixtures.ExposureConfigL2), map[string]any{"exposurePoolCIDRs": []any{"203.0.113.0/24"}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			values := selfHostedValues(t, tc.shoot)
			maps.Copy(values, tc.values)
			if got := strings.Contains(validations(policyIn(t, values, "-confine-writes")), `["`+fixtures.NodeNetwork+`"].exists(n`); got != tc.want {
				t.Errorf("pools held to the node network: %t, want %t", got, tc.want)
			}
		})
	}
}
