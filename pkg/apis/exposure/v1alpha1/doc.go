// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure
// +k8s:openapi-gen=true
// +k8s:defaulter-gen=TypeMeta
// +groupName=cilium-selfhosted.extensions.gardener.cloud

// Package v1alpha1 is the versioned providerConfig of a SelfHostedShootExposure of type cilium.
package v1alpha1
