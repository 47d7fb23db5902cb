// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	"github.com/gardener/gardener/pkg/chartrenderer"

	"github.com/gardener/gardener-extension-cilium-selfhosted/charts"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/helm"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/resourcemanager"
)

// extensionKubeconfig is the file in Dir with the kubeconfig of the extension's identity.
const extensionKubeconfig = "extension-kubeconfig"

// InstallChart installs the extension's chart as gardenlet and gardenadm do on the self-hosted shoot: rendered with
// their values for the shoot of CreateSelfHostedShoot by Gardener's chart renderer, stored as the ManagedResource
// kube-system/<registration name> of class seed, applied by Gardener's resource manager. The chart's DaemonSet stays
// without pods unless a suite runs the DaemonSet controller and creates the PriorityClass its pods need
// (CreateSystemPriorityClass), as test/integration/rollout and test/framework/ciliumnodes do; Extensions().Run runs
// the extension as that DaemonSet's pod would. It writes a kubeconfig that impersonates the chart's ServiceAccount and
// returns its path: the extension run with it may do exactly what the chart grants.
func (e *Env) InstallChart(ctx context.Context, webhookPort int) (string, error) {
	if e.shoot == nil {
		return "", fmt.Errorf("no self-hosted shoot created yet")
	}
	values, err := ChartValues(e.shoot)
	if err != nil {
		return "", err
	}
	// The suite's webhook server listens on loopback like the chart's, at a free port of this machine.
	values["webhookConfig"] = map[string]any{"port": webhookPort}
	// As an operator sets them in the ControllerDeployment's values, in place of what the suite's Shoot declares: the
	// suites run several exposures, each with a providerConfig of its own, in these ranges.
	values["exposurePoolCIDRs"] = ExposurePoolCIDRs
	values["exposureEndpointCIDRs"] = ExposureEndpointCIDRs
	values["exposurePeerCIDRs"] = ExposurePeerCIDRs
	rendered, err := renderChart(values)
	if err != nil {
		return "", err
	}
	rm, err := resourcemanager.New(e.Config, e.Client, resourcemanager.SeedClass)
	if err != nil {
		return "", err
	}
	if err := rm.DeployForSeed(ctx, cilium.Namespace, RegistrationName, rendered.AsSecretData()); err != nil {
		return "", fmt.Errorf("the resource manager applying the extension's chart: %w", err)
	}

	config, err := clientcmd.LoadFromFile(e.Kubeconfig)
	if err != nil {
		return "", err
	}
	extension := ServiceAccount(ExtensionNamespace, ServiceAccountName, "")
	for _, user := range config.AuthInfos {
		user.Impersonate, user.ImpersonateGroups = extension.User, extension.Groups
	}
	path := filepath.Join(e.Dir, extensionKubeconfig)
	return path, clientcmd.WriteToFile(*config, path)
}

// forbidden matches what client-go and controller-runtime log when RBAC refuses a request.
var forbidden = regexp.MustCompile(`(?i)forbidden|is not allowed|cannot (get|list|watch|create|update|patch|delete) resource`)

// Forbidden returns the lines of log in which the API server refused the extension something.
func Forbidden(log string) []string {
	var lines []string
	for _, line := range strings.Split(log, "\n") {
		if forbidden.MatchString(line) {
			lines = append(lines, line)
		}
	}
	return lines
}

// rbacRefusal is how kube-apiserver's RBAC authorizer words a refusal (plugin/pkg/auth/authorizer/rbac).
var rbacRefusal = regexp.MustCompile(`cannot (\w+) resource \\?"([^"\\]+)\\?" in API group \\?"([^"\\]*)\\?"(?: in the namespace \\?"([^"\\]+)\\?")?`)

// refusedName is the name of the object in a refusal of a request for one object, or of a list or watch by its name
// (apimachinery's NewForbidden: <resource> "<name>" is forbidden), which RBAC judges by resourceNames.
var refusedName = regexp.MustCompile(`\\?"([^"\\]+)\\?" is forbidden: User`)

// StillForbidden keeps the lines of Forbidden whose RBAC refusal the chart's RBAC still makes, by a
// SubjectAccessReview for the extension's ServiceAccount now. A kube-apiserver that has just restarted (RestartAPIServer)
// refuses requests until its authorizer's informers have synced, while it already listens: those refusals are its, not
// the chart's. Lines that are not RBAC refusals (an admission policy's) are kept.
func (e *Env) StillForbidden(ctx context.Context, lines []string) []string {
	var kept []string
	for _, line := range lines {
		m := rbacRefusal.FindStringSubmatch(line)
		if m == nil {
			kept = append(kept, line)
			continue
		}
		resource, subresource, _ := strings.Cut(m[2], "/")
		var name string
		if n := refusedName.FindStringSubmatch(line); n != nil {
			name = n[1]
		}
		extension := ServiceAccount(ExtensionNamespace, ServiceAccountName, "")
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   extension.User,
			Groups: extension.Groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: m[1], Resource: resource, Subresource: subresource, Group: m[3], Namespace: m[4], Name: name,
			},
		}}
		if err := e.Client.Create(ctx, review); err != nil || !review.Status.Allowed {
			kept = append(kept, line)
		}
	}
	return kept
}

// ExtensionClient is a client with the extension's own identity: the chart's ServiceAccount, impersonated as
// InstallChart set it up; t fails when it cannot be built.
func (e *Env) ExtensionClient(t testing.TB) client.Client {
	t.Helper()
	config, err := clientcmd.BuildConfigFromFlags("", filepath.Join(e.Dir, extensionKubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(config, client.Options{Scheme: e.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// MetricsReaderToken is a token of a ServiceAccount bound to the chart's metrics-reader ClusterRole, as Prometheus'
// is: what may read the extension's /metrics.
func (e *Env) MetricsReaderToken(ctx context.Context) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ExtensionNamespace, Name: "metrics-scraper"}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ServiceAccountName + "-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}},
	}
	for _, obj := range []client.Object{sa, binding} {
		if err := e.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
	}
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if err := e.Client.SubResource("token").Create(ctx, sa, request); err != nil {
		return "", err
	}
	return request.Status.Token, nil
}

// ExposurePoolCIDRs are the blocks the exposures' pools may take where InstallChart installs the chart: the ranges for
// documentation (RFC 5737, RFC 3849) and for benchmarks (RFC 2544), which no packet of the suites leaves the machine
// for, and a range of the fixtures' node network for VIPs announced there.
var ExposurePoolCIDRs = []string{"203.0.113.0/24", "198.51.100.0/24", "198.18.0.0/15", "2001:db8::/32", "10.0.255.0/24"}

// ExposureEndpointCIDRs are the addresses the exposures' EndpointSlices may name where InstallChart installs the chart:
// the fixtures' node network and the addresses the datapath suites and the bench give their control-plane nodes.
var ExposureEndpointCIDRs = []string{"10.0.0.0/8", "fd00::/8"}

// ExposurePeerCIDRs are the addresses the exposures' BGP peers may have where InstallChart installs the chart: the
// fixtures' and the datapath suites' routers.
var ExposurePeerCIDRs = []string{"10.0.0.0/8", "fd00::/8"}

// RegistrationName is the name of the extension's ControllerRegistration (example/controller-registration.yaml):
// gardenlet renders the chart as release <name> into namespace extension-<name> and stores it as the ManagedResource
// kube-system/<name> (controllerinstallation reconciler, NamespaceNameForControllerInstallation).
const RegistrationName = "cilium-selfhosted"

// ServiceAccountName is the chart's ServiceAccount, the extension's identity.
const ServiceAccountName = "gardener-extension-cilium-selfhosted"

// ImageRepository is the name make image gives the extension's image (hack/image/build.sh), which the suites set as
// the chart's image.repository as an operator sets where they pushed it.
const ImageRepository = "localhost/gardener-extension-cilium-selfhosted"

// ChartValues are the values gardenlet and gardenadm give the extension's chart on the self-hosted shoot
// (pkg/gardenlet/controller/controllerinstallation/controllerinstallation/reconciler.go: gardener.version, garden,
// gardenlet, selfHostedShootCluster and shoot with its spec) beside the image's repository, which the operator's
// ControllerDeployment sets, passed through JSON as Gardener's chart renderer does (pkg/chartrenderer
// renderRelease), so that templates see the Shoot's fields by their JSON names.
func ChartValues(shoot *gardencorev1beta1.Shoot) (map[string]any, error) {
	values := map[string]any{"image": map[string]any{"repository": ImageRepository}, "gardener": map[string]any{
		"version":                "v1.150.0",
		"garden":                 map[string]any{"clusterIdentity": "garden"},
		"gardenlet":              map[string]any{"featureGates": map[string]bool{}},
		"selfHostedShootCluster": true,
		"shoot": map[string]any{
			"name":        shoot.Name,
			"namespace":   shoot.Namespace,
			"labels":      shoot.Labels,
			"annotations": shoot.Annotations,
			"spec":        shoot.Spec,
		},
	}}
	raw, err := json.Marshal(values)
	if err != nil {
		return nil, err
	}
	values = nil
	return values, json.Unmarshal(raw, &values)
}

// RenderChart renders the extension's chart for shoot with Gardener's chart renderer, as gardenlet does.
func RenderChart(shoot *gardencorev1beta1.Shoot) (*chartrenderer.RenderedChart, error) {
	values, err := ChartValues(shoot)
	if err != nil {
		return nil, err
	}
	return renderChart(values)
}

func renderChart(values map[string]any) (*chartrenderer.RenderedChart, error) {
	return helm.GardenerRenderer().RenderEmbeddedFS(charts.FS, charts.ChartPath, RegistrationName, ExtensionNamespace, values)
}

// CreateSystemPriorityClass creates the priority class of the extension's pods, as Gardener's seed system component
// creates it (pkg/component/seed/system/system.go): without it, admission refuses the pods the DaemonSet controller
// makes of the chart's DaemonSet.
func (e *Env) CreateSystemPriorityClass(ctx context.Context) error {
	err := e.Client.Create(ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: v1beta1constants.PriorityClassNameSeedSystem900}, Value: 999998900,
	})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
