// The pages' only script (served from /static/passkeys.js; the pages allow no inline script). It
// runs the WebAuthn ceremonies with @simplewebauthn/browser (/static/simplewebauthn-browser.js) and
// hands their result to an ordinary form post: the server gave the options in a JSON data block and
// checks everything itself. Without it, every page but these three ceremonies (adding a passkey,
// approving with one, removing one) still works.
(function () {
  'use strict';
  var lib = window.SimpleWebAuthnBrowser;

  function optionsFrom(id) {
    var element = document.getElementById(id);
    return element ? JSON.parse(element.textContent) : null;
  }

  function showError(error) {
    var element = document.getElementById('passkey-error');
    if (!element) return;
    element.textContent = 'Your passkey did not work: ' + (error && error.message ? error.message : String(error));
    element.hidden = false;
  }

  // A button that runs a ceremony, which fills the form's hidden fields, then posts its form.
  function ceremonyButton(buttonId, ceremony) {
    var button = document.getElementById(buttonId);
    if (!button || !lib) return;
    button.addEventListener('click', function (event) {
      event.preventDefault();
      ceremony().then(function () {
        button.form.submit();
      }).catch(showError);
    });
  }

  function fill(fieldId, result) {
    document.getElementById(fieldId).value = JSON.stringify(result);
  }

  // Adding a passkey (/passkeys/new). A person who holds passkeys proves one of them first (the
  // server asks for it with a second set of options); then the new one is created.
  var registration = optionsFrom('passkey-registration-options');
  var proof = optionsFrom('passkey-proof-options');
  if (registration) {
    ceremonyButton('create-passkey', function () {
      var proved = proof ? lib.startAuthentication({ optionsJSON: proof }) : Promise.resolve(null);
      return proved.then(function (assertion) {
        if (assertion) fill('passkey-proof', assertion);
        return lib.startRegistration({ optionsJSON: registration });
      }).then(function (response) {
        fill('passkey-response', response);
      });
    });
  }

  // Removing a passkey (/account/passkeys/remove): one of the person's passkeys confirms it, and
  // the form posts that assertion with the passkey to remove.
  var removal = optionsFrom('passkey-removal-options');
  if (removal) {
    ceremonyButton('remove-passkey', function () {
      return lib.startAuthentication({ optionsJSON: removal }).then(function (assertion) {
        fill('passkey-assertion', assertion);
      });
    });
  }

  // Approving a capability that needs presence (the approval page).
  var presence = optionsFrom('presence-options');
  var form = document.getElementById('decision-form');
  if (presence && form && lib) {
    form.addEventListener('submit', function (event) {
      var submitter = event.submitter;
      if (!submitter || submitter.value !== 'approve') return;
      var needsPresence = Array.prototype.some.call(form.querySelectorAll('input[data-presence]'), function (box) {
        return box.checked;
      });
      if (!needsPresence) return;
      event.preventDefault();
      lib.startAuthentication({ optionsJSON: presence }).then(function (response) {
        fill('presence-response', response);
        // form.submit() sends no submitter, so the verdict travels in a field of its own.
        var verdict = document.createElement('input');
        verdict.type = 'hidden';
        verdict.name = 'verdict';
        verdict.value = 'approve';
        form.appendChild(verdict);
        form.submit();
      }).catch(showError);
    });
  }
})();
