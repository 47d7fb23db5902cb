package testenv

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/charts"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/helm"
)

// extensionKubeconfig is the file in Dir with the kubeconfig of the extension's identity.
const extensionKubeconfig = "extension-kubeconfig"

// ChartValuesSelfHosted are the values gardenadm gives the extension's chart on a self-hosted shoot.
var ChartValuesSelfHosted = map[string]any{"gardener": map[string]any{"selfHostedShootCluster": true}}

// ApplyChartAccess renders the extension's chart as on a self-hosted shoot into ExtensionNamespace, creates its
// ServiceAccount, RBAC and admission policies, and writes a kubeconfig that impersonates that ServiceAccount. It
// returns the kubeconfig's path: the extension run with it may do exactly what the chart grants.
func (e *Env) ApplyChartAccess(ctx context.Context) (string, error) {
	chart, err := helm.LoadFS(charts.FS, charts.ChartPath)
	if err != nil {
		return "", err
	}
	objs, _, err := helm.Render(chart, "cilium-selfhosted", ExtensionNamespace, ChartValuesSelfHosted, scheme.New())
	if err != nil {
		return "", err
	}
	var serviceAccount *corev1.ServiceAccount
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			serviceAccount = o
		case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding, *rbacv1.Role, *rbacv1.RoleBinding,
			*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
		default:
			continue
		}
		if err := e.Client.Create(ctx, obj.DeepCopyObject().(client.Object)); err != nil {
			return "", fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	if serviceAccount == nil {
		return "", fmt.Errorf("the chart renders no ServiceAccount")
	}

	config, err := clientcmd.LoadFromFile(e.Kubeconfig)
	if err != nil {
		return "", err
	}
	for _, user := range config.AuthInfos {
		user.Impersonate = "system:serviceaccount:" + serviceAccount.Namespace + ":" + serviceAccount.Name
		user.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + serviceAccount.Namespace, "system:authenticated"}
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

// ExtensionClient is a client with the extension's own identity: the chart's ServiceAccount, impersonated as
// ApplyChartAccess set it up.
func (e *Env) ExtensionClient() (client.Client, error) {
	config, err := clientcmd.BuildConfigFromFlags("", filepath.Join(e.Dir, extensionKubeconfig))
	if err != nil {
		return nil, err
	}
	return client.New(config, client.Options{Scheme: e.Client.Scheme()})
}
