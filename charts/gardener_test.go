package charts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"
	"github.com/gardener/gardener/pkg/resourcemanager/webhook/highavailabilityconfig"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/fixtures"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/testenv"
)

// TestGardenersRendererKeepsEveryObject: gardenlet renders the chart with Gardener's chart renderer and stores one
// secret key per manifest, named after file, kind and name; two objects that share them (e.g. equally named Roles in
// two namespaces in one file) would lose one. Every object the Helm SDK renders must arrive in the ManagedResource.
func TestGardenersRendererKeepsEveryObject(t *testing.T) {
	rendered, err := testenv.RenderChart(fixtures.Shoot(true))
	if err != nil {
		t.Fatal(err)
	}
	objs := render(t, selfHostedValues(t, fixtures.Shoot(true)))
	if got := len(rendered.AsSecretData()); got != len(objs) {
		t.Errorf("Gardener's chart renderer keeps %d manifests of %d objects", got, len(objs))
	}
}

// TestWebhookConfigurationLeftToTheExtension: on a self-hosted shoot the chart creates the extension's
// MutatingWebhookConfiguration without webhooks, marked so that Gardener's resource manager only creates it and
// leaves the extension's webhooks in place; elsewhere the chart has none.
func TestWebhookConfigurationLeftToTheExtension(t *testing.T) {
	if mwcs := find[*admissionregistrationv1.MutatingWebhookConfiguration](render(t, nil)); len(mwcs) != 0 {
		t.Errorf("%d MutatingWebhookConfigurations outside a self-hosted shoot", len(mwcs))
	}
	mwcs := find[*admissionregistrationv1.MutatingWebhookConfiguration](render(t, selfHostedValues(t, fixtures.Shoot(true))))
	if len(mwcs) != 1 {
		t.Fatalf("%d MutatingWebhookConfigurations, want the extension's", len(mwcs))
	}
	if mwc := mwcs[0]; mwc.Name != testenv.WebhookConfigName || mwc.Annotations[resourcesv1alpha1.Ignore] != "true" || len(mwc.Webhooks) != 0 {
		t.Errorf("MutatingWebhookConfiguration %s, annotations %v, %d webhooks; want %s, %s=true, none",
			mwc.Name, mwc.Annotations, len(mwc.Webhooks), testenv.WebhookConfigName, resourcesv1alpha1.Ignore)
	}
}

// TestReplicasSetByGardenersHighAvailabilityWebhook: the Deployment as gardenlet renders it, admitted by the
// high-availability-config webhook of Gardener's resource manager (its own handler) in the extension's namespace as
// gardenlet labels it: two replicas with a highly available control plane, one with a single control-plane node,
// where a second could never be scheduled.
func TestReplicasSetByGardenersHighAvailabilityWebhook(t *testing.T) {
	nonHA := fixtures.Shoot(true)
	nonHA.Spec.ControlPlane = nil
	nonHA.Spec.Provider.Workers[0].Maximum = 1
	for name, tc := range map[string]struct {
		shoot        *gardencorev1beta1.Shoot
		controlPlane int
		want         int32
	}{
		"highly available control plane": {fixtures.Shoot(true), 3, 2},
		"one control-plane node":         {nonHA, 1, 1},
	} {
		t.Run(name, func(t *testing.T) {
			deployment := find[*appsv1.Deployment](render(t, selfHostedValues(t, tc.shoot)))[0]
			namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
				v1beta1constants.GardenRole:                      v1beta1constants.GardenRoleExtension,
				resourcesv1alpha1.HighAvailabilityConfigConsider: "true",
			}}}
			objs := []runtime.Object{namespace}
			for i := range tc.controlPlane + 2 {
				objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + strconv.Itoa(i)}})
			}
			c := fake.NewClientBuilder().WithScheme(scheme.New()).WithRuntimeObjects(objs...).Build()
			handler := &highavailabilityconfig.Handler{Logger: log.Log, TargetClient: c, Decoder: admission.NewDecoder(scheme.New())}
			raw, err := json.Marshal(deployment)
			if err != nil {
				t.Fatal(err)
			}
			resp := handler.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Kind:      metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
				Namespace: namespace.Name, Name: deployment.Name, Operation: admissionv1.Create,
				Object: runtime.RawExtension{Raw: raw},
			}})
			if !resp.Allowed {
				t.Fatalf("the high-availability-config webhook refused the Deployment: %+v", resp.Result)
			}
			replicas := *deployment.Spec.Replicas
			for _, p := range resp.Patches {
				if p.Path == "/spec/replicas" {
					n, err := strconv.Atoi(fmt.Sprint(p.Value))
					if err != nil {
						t.Fatalf("replicas patched to %v", p.Value)
					}
					replicas = int32(n)
				}
			}
			if replicas != tc.want {
				t.Errorf("%d replicas, want %d", replicas, tc.want)
			}
		})
	}
}
