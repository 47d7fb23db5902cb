// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	v1beta1constants "github.com/gardener/gardener/pkg/apis/core/v1beta1/constants"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	resourcesv1alpha1 "github.com/gardener/gardener/pkg/apis/resources/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/selfhosted"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

// ExtensionNamespace is where the extension runs and keeps its webhook CA and server certificate.
const ExtensionNamespace = "extension-cilium-selfhosted"

// WebhookConfigName is the MutatingWebhookConfiguration the extension registers at start.
const WebhookConfigName = "gardener-extension-cilium-selfhosted"

// CreateSelfHostedShoot creates what gardenadm has created before the extension starts: the extension's namespace,
// the Cluster of shoot, the Nodes with their addresses, and the role label Gardener puts on kube-system.
func (e *Env) CreateSelfHostedShoot(ctx context.Context, shoot *gardencorev1beta1.Shoot) error {
	c := e.Client
	e.shoot = shoot
	// Labelled as gardenlet's controllerinstallation reconciler labels it (reconciler.go, GetAndCreateOrMergePatch of
	// the namespace); its zones annotation only when worker pools name zones.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ExtensionNamespace, Labels: map[string]string{
		v1beta1constants.GardenRole:                      v1beta1constants.GardenRoleExtension,
		v1beta1constants.LabelControllerRegistrationName: RegistrationName,
		resourcesv1alpha1.HighAvailabilityConfigConsider: "true",
		resourcesv1alpha1.SystemComponentsConfigConsider: "true",
	}}}); err != nil {
		return err
	}
	kubeSystem := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: cilium.Namespace}, kubeSystem); err != nil {
		return err
	}
	patch := client.MergeFrom(kubeSystem.DeepCopy())
	kubeSystem.Labels["gardener.cloud/role"] = "shoot"
	if err := c.Patch(ctx, kubeSystem, patch); err != nil {
		return err
	}
	if err := c.Create(ctx, fixtures.Cluster(shoot)); err != nil {
		return err
	}
	for _, node := range fixtures.Nodes() {
		if err := e.CreateNode(ctx, node); err != nil {
			return err
		}
	}
	return nil
}

// UpdateShoot changes the shoot of the Cluster resource with mutate, as gardenlet writes the Cluster when the Shoot
// changes.
func (e *Env) UpdateShoot(ctx context.Context, mutate func(*gardencorev1beta1.Shoot)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cluster := &extensionsv1alpha1.Cluster{}
		if err := e.Client.Get(ctx, client.ObjectKey{Name: selfhosted.ClusterName}, cluster); err != nil {
			return err
		}
		shoot := &gardencorev1beta1.Shoot{}
		if err := json.Unmarshal(cluster.Spec.Shoot.Raw, shoot); err != nil {
			return err
		}
		mutate(shoot)
		raw, err := json.Marshal(shoot)
		if err != nil {
			return err
		}
		cluster.Spec.Shoot.Raw = raw
		return e.Client.Update(ctx, cluster)
	})
}

// CreateNode creates node with its status (addresses), which a create alone drops.
func (e *Env) CreateNode(ctx context.Context, node *corev1.Node) error {
	status := node.Status
	if err := e.Client.Create(ctx, node); err != nil {
		return err
	}
	node.Status = status
	return e.Client.Status().Update(ctx, node)
}

// SetInternalIP makes ip the node's InternalIP, as kubelet reports it.
func (e *Env) SetInternalIP(ctx context.Context, name, ip string) error {
	// Cilium's agents write their Node's conditions meanwhile.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
		return e.Client.Status().Update(ctx, node)
	})
}

// WaitForWebhooks waits until the extension has registered its webhooks with a CA bundle and written the endpoints
// ConfigMap. A crash of extension is reported as such rather than waited out.
func (e Extensions) WaitForWebhooks(ctx context.Context, webhooks int, extension *Process) error {
	return WaitFor(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		select {
		case <-extension.Stopped():
			return false, fmt.Errorf("the extension stopped: %v", extension.Err())
		default:
		}
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := e.Client.Get(ctx, client.ObjectKey{Name: WebhookConfigName}, mwc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if len(mwc.Webhooks) != webhooks {
			return false, fmt.Errorf("%d webhooks registered, want %d", len(mwc.Webhooks), webhooks)
		}
		for _, wh := range mwc.Webhooks {
			if len(wh.ClientConfig.CABundle) == 0 {
				return false, fmt.Errorf("webhook %s has no CA bundle yet", wh.Name)
			}
		}
		cm := &corev1.ConfigMap{}
		if err := e.Client.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: apiserverendpoints.ConfigMapName}, cm); err != nil {
			if apierrors.IsNotFound(err) {
				return false, fmt.Errorf("no endpoints ConfigMap yet")
			}
			return false, err
		}
		return true, nil
	})
}

// WaitUntilGone waits until obj no longer exists, e.g. until Gardener's reconciler released an exposure's finalizer.
func (e *Env) WaitUntilGone(ctx context.Context, obj client.Object, timeout time.Duration) error {
	return WaitFor(ctx, timeout, func(ctx context.Context) (bool, error) {
		err := e.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
}
