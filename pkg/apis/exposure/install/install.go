// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

// Package install registers the exposure configuration API, internal and versioned, in a scheme.
package install

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure/v1alpha1"
)

var (
	schemeBuilder = runtime.NewSchemeBuilder(v1alpha1.AddToScheme, exposure.AddToScheme, setVersionPriority)
	// AddToScheme adds all versions of the API to a scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

func setVersionPriority(scheme *runtime.Scheme) error {
	return scheme.SetVersionPriority(v1alpha1.SchemeGroupVersion)
}

// Install installs all versions of the API into a scheme.
func Install(scheme *runtime.Scheme) {
	utilruntime.Must(AddToScheme(scheme))
}
