// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package selfhosted tells whether the cluster this extension runs in is a Gardener self-hosted shoot (GEP-36).
package selfhosted

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1helper "github.com/gardener/gardener/pkg/api/core/v1beta1/helper"
	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"
	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"
	"github.com/gardener/gardener/pkg/extensions"
)

// ClusterName is the name of the Cluster resource of a self-hosted shoot: Gardener names it after the control-plane
// namespace, which is kube-system when the shoot hosts its own control plane.
const ClusterName = "kube-system"

// ShootReader reads the shoot of the Cluster `kube-system` and keeps it decoded until the Cluster changes: decoding
// the embedded shoot costs more than a whole mutation, and the webhook needs it on every admission.
type ShootReader struct {
	reader client.Reader

	mu              sync.Mutex
	uid             types.UID
	resourceVersion string
	shoot           *gardencorev1beta1.Shoot
}

// NewShootReader returns a ShootReader that reads the Cluster with reader (the manager's cached client).
func NewShootReader(reader client.Reader) *ShootReader {
	return &ShootReader{reader: reader}
}

// Shoot returns the shoot of the Cluster `kube-system` if it is a self-hosted shoot, i.e. one with a worker pool that
// runs the control plane, and nil otherwise. A missing Cluster is not an error: the cluster then simply is not
// self-hosted. The shoot is shared between callers and must not be modified.
func (s *ShootReader) Shoot(ctx context.Context) (*gardencorev1beta1.Shoot, error) {
	cluster := &extensionsv1alpha1.Cluster{}
	if err := s.reader.Get(ctx, client.ObjectKey{Name: ClusterName}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Cluster %s: %w", ClusterName, err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if cluster.UID != s.uid || cluster.ResourceVersion != s.resourceVersion || cluster.ResourceVersion == "" {
		shoot, err := extensions.ShootFromCluster(cluster)
		if err != nil {
			return nil, fmt.Errorf("decoding the shoot of Cluster %s: %w", ClusterName, err)
		}
		if shoot != nil && !v1beta1helper.IsShootSelfHosted(shoot.Spec.Provider.Workers) {
			shoot = nil
		}
		s.uid, s.resourceVersion, s.shoot = cluster.UID, cluster.ResourceVersion, shoot
	}
	return s.shoot, nil
}
