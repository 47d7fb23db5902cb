// Package selfhosted tells whether the cluster this extension runs in is a Gardener self-hosted shoot (GEP-36).
package selfhosted

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1helper "github.com/gardener/gardener/pkg/api/core/v1beta1/helper"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	"github.com/gardener/gardener/pkg/extensions"
)

// ClusterName is the name of the Cluster resource of a self-hosted shoot: Gardener names it after the control-plane
// namespace, which is kube-system when the shoot hosts its own control plane.
const ClusterName = "kube-system"

// Shoot returns the shoot of the Cluster `kube-system` if it is a self-hosted shoot, i.e. one with a worker pool that
// runs the control plane, and nil otherwise. A missing Cluster is not an error: the cluster then simply is not
// self-hosted.
func Shoot(ctx context.Context, reader client.Reader) (*gardencorev1beta1.Shoot, error) {
	cluster := &extensionsv1alpha1.Cluster{}
	if err := reader.Get(ctx, client.ObjectKey{Name: ClusterName}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Cluster %s: %w", ClusterName, err)
	}
	shoot, err := extensions.ShootFromCluster(cluster)
	if err != nil {
		return nil, fmt.Errorf("decoding the shoot of Cluster %s: %w", ClusterName, err)
	}
	if shoot == nil || !v1beta1helper.IsShootSelfHosted(shoot.Spec.Provider.Workers) {
		return nil, nil
	}
	return shoot, nil
}
