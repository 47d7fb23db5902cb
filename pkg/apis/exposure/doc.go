// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// +k8s:deepcopy-gen=package
// +groupName=cilium-selfhosted.extensions.gardener.cloud

// Package exposure is the internal version of the providerConfig of a SelfHostedShootExposure of type cilium: how
// kube-apiserver is exposed on a virtual IP with Cilium's LB-IPAM and L2 announcements or BGP.
package exposure
